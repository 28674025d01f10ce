//! The benchmark's `--base` splicing (benches/um_bench/splice.rs), on text: the benchmark itself
//! runs only on a GPU, its page surgery is checked here.

#[allow(dead_code)]
#[path = "../benches/um_bench/splice.rs"]
mod splice;

const BASE: &str = "# Performance\n\nMeasured on **H200**, 2026-11-21.\n\n\
## 1. Host cost of one launch\n\nold launch\n\n### 1b. paired\n\nold paired\n\n\
## 5. Cost of each transition\n\nold transitions\n\n\
## 8. NCCL all-reduce: not measured yet\n\nplaceholder\n\n\
## Goals\n\nold goals\n\n## Analysis\n\nold analysis\n";

fn new_page(sections: &[(&str, &str)]) -> String {
    let mut s = "# Performance\n\nMeasured on **H100**, 2026-11-22.\n\n".to_owned();
    for (h, body) in sections {
        s.push_str(&format!("## {h}\n\n{body}\n\n"));
    }
    s.push_str("## Goals\n\nnew goals\n\n## Analysis\n\nnew analysis\n");
    s
}

#[test]
fn measured_sections_replace_the_same_numbers_and_the_rest_is_kept() {
    let new = new_page(&[
        (
            "1. Host cost of one launch",
            "new launch\n\n### 1b. paired\n\nnew paired",
        ),
        (
            "2. The run_task loop",
            "new run_task (not measured, not spliced)",
        ),
        ("5. Cost of each transition", "new transitions"),
    ]);
    let keys = vec!["1".to_owned(), "5".to_owned()];
    let got = splice::splice(BASE, &new, &keys, "Sections 1, 5 measured again.");
    assert!(
        got.contains("new launch") && got.contains("new paired"),
        "{got}"
    );
    assert!(got.contains("new transitions"), "{got}");
    assert!(
        !got.contains("old launch") && !got.contains("old paired"),
        "{got}"
    );
    assert!(!got.contains("old transitions"), "{got}");
    // Not in `keys`: the base's stays, the new page's is not taken.
    assert!(!got.contains("new run_task"), "{got}");
    assert!(got.contains("placeholder"), "{got}");
    // Unnumbered sections are always the base's.
    assert!(
        got.contains("old goals") && got.contains("old analysis"),
        "{got}"
    );
    assert!(
        !got.contains("new goals") && !got.contains("new analysis"),
        "{got}"
    );
    // The note follows the base's header; the order of sections is the base's.
    let note = got.find("Sections 1, 5 measured again.").expect("note");
    assert!(got.find("Measured on **H200**").expect("header") < note);
    assert!(note < got.find("## 1.").expect("section 1"));
    assert!(got.find("## 1.").unwrap() < got.find("## 5.").unwrap());
}

#[test]
fn new_numbers_go_before_the_goals_and_renumbered_placeholders_are_replaced() {
    let new = new_page(&[
        ("8. cuBLAS on owned buffers", "new cublas"),
        ("9. CUDA graphs", "new graphs"),
    ]);
    let keys = vec!["8".to_owned(), "9".to_owned()];
    let got = splice::splice(BASE, &new, &keys, "");
    assert!(!got.contains("placeholder"), "{got}");
    let (c, g, goals) = (
        got.find("new cublas").expect("8"),
        got.find("new graphs").expect("9"),
        got.find("## Goals").expect("goals"),
    );
    assert!(
        got.find("## 5.").unwrap() < c && c < g && g < goals,
        "{got}"
    );
    assert!(got.contains("old transitions"));
    // In number order, also where a higher number is already there (NCCL's 10).
    let with_ten = BASE.replace(
        "## Goals",
        "## 10. NCCL all-reduce, 2 GPUs\n\nten\n\n## Goals",
    );
    let got = splice::splice(&with_ten, &new, &keys, "");
    let (g, ten) = (got.find("new graphs").unwrap(), got.find("## 10.").unwrap());
    assert!(g < ten && ten < got.find("## Goals").unwrap(), "{got}");
}

#[test]
fn nccl_sections_are_kept_apart_by_gpu_count_and_retire_the_placeholder() {
    let base = BASE.replace(
        "## Goals",
        "## 10. NCCL all-reduce: not measured yet\n\nnccl placeholder\n\n## Goals",
    );
    let two = new_page(&[("10. NCCL all-reduce, 2 GPUs", "two gpus")]);
    let after_two = splice::splice(
        &base,
        &two,
        &["10. NCCL all-reduce, 2 GPUs".to_owned()],
        "Section 10 measured on 2 GPUs.",
    );
    assert!(after_two.contains("two gpus") && !after_two.contains("nccl placeholder"));
    let four = new_page(&[("10. NCCL all-reduce, 4 GPUs", "four gpus")]);
    let after_four = splice::splice(
        &after_two,
        &four,
        &["10. NCCL all-reduce, 4 GPUs".to_owned()],
        "Section 10 measured on 4 GPUs.",
    );
    assert!(after_four.contains("two gpus") && after_four.contains("four gpus"));
    assert!(after_four.find("two gpus").unwrap() < after_four.find("four gpus").unwrap());
    // Both notes, in the order of the runs.
    let (n2, n4) = (
        after_four.find("measured on 2 GPUs").expect("note 2"),
        after_four.find("measured on 4 GPUs").expect("note 4"),
    );
    assert!(n2 < n4 && n4 < after_four.find("## 1.").unwrap());
    // Splicing the same GPU count again replaces it, never duplicates it.
    let again = splice::splice(
        &after_four,
        &new_page(&[("10. NCCL all-reduce, 2 GPUs", "two gpus, again")]),
        &["10. NCCL all-reduce, 2 GPUs".to_owned()],
        "",
    );
    assert_eq!(again.matches("## 10. NCCL all-reduce, 2 GPUs").count(), 1);
    assert!(again.contains("two gpus, again"));
}

#[test]
fn only_launch_paired_replaces_nothing_and_unknown_scenarios_have_no_section() {
    assert_eq!(splice::section_of("launch_paired"), None);
    assert_eq!(splice::section_of("bandwidth"), None);
    assert_eq!(splice::section_of("launch"), Some("1"));
    assert_eq!(splice::section_of("graphs"), Some("9"));
}

#[test]
fn stream_ordered_allocation_and_device_storage_sections_go_in_number_order_before_the_goals() {
    assert_eq!(splice::section_of("alloc"), Some("12"));
    assert_eq!(splice::section_of("device"), Some("13"));
    let new = new_page(&[
        ("12. Stream-ordered allocation", "new alloc"),
        ("13. Device-only storage in the run_task loop", "new device"),
    ]);
    let keys = vec!["12".to_owned(), "13".to_owned()];
    let got = splice::splice(BASE, &new, &keys, "Sections 12, 13 measured again.");
    let at = |s: &str| got.find(s).unwrap_or_else(|| panic!("no {s:?} in {got}"));
    assert!(at("## 8. NCCL") < at("new alloc"), "{got}");
    assert!(at("new alloc") < at("new device"), "{got}");
    assert!(at("new device") < at("## Goals"), "{got}");
    assert!(
        got.contains("old goals") && !got.contains("new goals"),
        "{got}"
    );
}

#[test]
fn a_note_of_the_same_device_and_sections_replaces_the_earlier_one() {
    let new = new_page(&[("5. Cost of each transition", "new transitions")]);
    let note = |names: &str, device: &str, date: &str| {
        format!("{names} measured again on **{device}**, driver CUDA 13.0, {date} (`um_bench`).")
    };
    let keys = vec!["5".to_owned()];
    let mut page = BASE.to_owned();
    for n in [
        note("Sections 1, 5", "NVIDIA H200", "day 1"),
        note("Section 5", "2× NVIDIA H200", "day 2"),
        note("Section 5", "NVIDIA H200", "day 3"),
        note("Section 5", "NVIDIA H200", "day 4"),
    ] {
        page = splice::splice(&page, &new, &keys, &n);
    }
    // Day 3's note is stale (same device, same section); day 1's names section 1 too, and
    // now only that one; day 2's is of another device: both stay, in the order of the runs.
    assert!(!page.contains("day 3"), "{page}");
    assert!(
        page.contains(&note("Section 1", "NVIDIA H200", "day 1")),
        "{page}"
    );
    let days: Vec<usize> = ["day 1", "day 2", "day 4"]
        .iter()
        .map(|d| page.find(d).expect(d))
        .collect();
    assert!(days[0] < days[1] && days[1] < days[2], "{page}");
    assert!(page.find("Measured on **H200**").unwrap() < days[0]);
    assert!(days[2] < page.find("## 1.").unwrap());
    assert_eq!(page.matches("measured again").count(), 3, "{page}");
}

#[test]
fn a_note_of_the_same_device_keeps_only_the_sections_a_later_run_did_not_measure_again() {
    let new = new_page(&[("5. Cost of each transition", "new transitions")]);
    let keys = vec!["5".to_owned()];
    let note = |names: &str, whose: &str, date: &str| {
        format!(
            "{names} measured again on **NVIDIA H200**, driver CUDA 13.0, {date} (`um_bench`): \
             {whose} ratios compare figures of that run."
        )
    };
    let page = splice::splice(BASE, &new, &keys, &note("Sections 1, 5", "their", "day 1"));
    let page = splice::splice(&page, &new, &keys, &note("Section 5", "its", "day 2"));
    assert!(
        page.contains(&note("Section 1", "its", "day 1")),
        "day 1's note names section 1 alone: {page}"
    );
    assert!(page.contains(&note("Section 5", "its", "day 2")), "{page}");
    assert_eq!(page.matches("measured again").count(), 2, "{page}");
}
