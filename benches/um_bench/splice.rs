//! `--base PAGE`: this run's sections in place of the same sections of an earlier run's page,
//! the rest of that page kept. Pure text work, tested by `tests/bench_splice.rs` (which includes
//! this file), since the benchmark itself only runs on a GPU.

/// The section a scenario's figures appear in: its `## ` heading's number, or for NCCL the whole
/// heading (one section per GPU count). `None`: the scenario has no section of its own.
pub(crate) fn section_of(scenario: &str) -> Option<&'static str> {
    Some(match scenario {
        // 1b (paired) is a subsection of 1: 1 is replaced when `launch` ran.
        "launch" => "1",
        "run_task" => "2",
        "threads" => "3",
        "overlap" => "4",
        "transitions" => "5",
        "mirror" => "6",
        "handoff" => "7",
        "cublas" => "8",
        "graphs" => "9",
        "solver" => "11",
        "alloc" => "12",
        "device" => "13",
        _ => return None,
    })
}

/// The key of a `## ` heading: `10. NCCL all-reduce, N GPUs` whole (one section per GPU count),
/// any other numbered heading by its number. Unnumbered headings (`## Goals`, `## Analysis`)
/// have none and are never replaced.
fn key(heading: &str) -> Option<String> {
    let rest = heading.strip_prefix("## ")?;
    let (number, title) = rest.split_once(". ")?;
    if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    if title.starts_with("NCCL all-reduce, ") {
        return Some(rest.to_owned());
    }
    Some(number.to_owned())
}

/// A page cut at its `## ` headings: the text before the first, then (key, text) per section.
fn sections(page: &str) -> (String, Vec<(Option<String>, String)>) {
    let mut head = String::new();
    let mut out: Vec<(Option<String>, String)> = Vec::new();
    for line in page.lines() {
        if line.starts_with("## ") {
            out.push((key(line), String::new()));
        }
        let text = match out.last_mut() {
            Some((_, text)) => text,
            None => &mut head,
        };
        text.push_str(line);
        text.push('\n');
    }
    (head, out)
}

/// A splice note's sections and device: "Sections 1, 5 measured again on **NVIDIA H200**, ..."
/// gives (["1", "5"], "NVIDIA H200"); `None` for any other paragraph.
fn note_parts(note: &str) -> Option<(Vec<&str>, &str)> {
    let (names, rest) = note.split_once(" measured again on **")?;
    let names = names
        .strip_prefix("Sections ")
        .or_else(|| names.strip_prefix("Section "))?;
    let (device, _) = rest.split_once("**")?;
    Some((names.split(", ").collect(), device))
}

/// The paragraph `old` as it stands once the splice note `new` is in: unchanged where it is
/// not a splice note of the same device or names none of `new`'s sections; `None` (stale) where
/// `new` names every section it names; else narrowed to the sections `new` does not name
/// ("Sections 12, 13 ..., their ratios" becomes "Section 12 ..., its ratios").
fn after_note(new: &str, old: &str) -> Option<String> {
    let (Some((new_names, new_device)), Some((old_names, old_device))) =
        (note_parts(new), note_parts(old))
    else {
        return Some(old.to_owned());
    };
    let left: Vec<&str> = old_names
        .iter()
        .copied()
        .filter(|n| !new_names.contains(n))
        .collect();
    if new_device != old_device || left.len() == old_names.len() {
        return Some(old.to_owned());
    }
    if left.is_empty() {
        return None;
    }
    let (_, rest) = old.split_once(" measured again on **")?;
    let one = left.len() == 1;
    let rest = if one {
        rest.replacen(": their ratios", ": its ratios", 1)
    } else {
        rest.to_owned()
    };
    Some(format!(
        "Section{} {} measured again on **{rest}",
        if one { "" } else { "s" },
        left.join(", ")
    ))
}

/// `base` with every section of `new` whose key is in `keys` put in place of the base's section
/// of that key. A section the base lacks goes in number order, before any unnumbered section
/// (`## Goals`); a section's key is its number, so a page of an older numbering has the
/// section of that number replaced whatever its title. An NCCL placeholder ("not measured")
/// goes once a measured NCCL section is in. `note` is added after the base's header (after
/// any notes of earlier splices), naming what this run measured.
pub(crate) fn splice(base: &str, new: &str, keys: &[String], note: &str) -> String {
    let (mut head, mut base_sections) = sections(base);
    let (_, new_sections) = sections(new);
    for (key, text) in new_sections {
        let Some(key) = key.filter(|k| keys.contains(k)) else {
            continue;
        };
        if let Some(slot) = base_sections
            .iter_mut()
            .find(|(k, _)| k.as_deref() == Some(key.as_str()))
        {
            slot.1 = text;
            continue;
        }
        // In number order: before the first unnumbered section or the first of a higher number.
        let number = |k: &str| -> u32 {
            k.split('.')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        let at = base_sections
            .iter()
            .position(|(k, _)| k.as_deref().is_none_or(|k| number(k) > number(&key)))
            .unwrap_or(base_sections.len());
        base_sections.insert(at, (Some(key), text));
    }
    // A placeholder that a measured section made stale: "## 10. NCCL all-reduce: not measured"
    // once a measured NCCL section exists.
    let measured_nccl = base_sections.iter().any(|(k, _)| {
        k.as_deref()
            .is_some_and(|k| k.contains("NCCL all-reduce, "))
    });
    base_sections.retain(|(_, text)| {
        let first = text.lines().next().unwrap_or("");
        !(measured_nccl && first.contains("NCCL") && first.contains("not measured"))
    });
    if !note.is_empty() {
        // After the "Measured on ..." paragraph and the notes of earlier splices, less what
        // this run makes stale: in a note of the same device, the sections this run measured
        // again (a note left with none goes).
        let kept: Vec<String> = head
            .trim_end()
            .split("\n\n")
            .filter_map(|p| after_note(note, p))
            .collect();
        head = format!("{}\n\n{note}\n\n", kept.join("\n\n"));
    }
    let mut out = head;
    for (_, text) in base_sections {
        out.push_str(&text);
    }
    out
}
