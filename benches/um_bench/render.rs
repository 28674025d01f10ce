//! `um_bench --render RESULTS --out OUT [--only LIST --base PAGE] [--notes FILE]`: the page
//! written again from a run's records (`performance-results.json`, or a partial run's
//! `results-of-this-run.json`), with no GPU: for a change to how the page shows figures
//! already measured. The machine, driver and date are the run's, from the file. This file
//! knows nothing else of the benchmark (`tests/bench_render.rs` checks it on text).

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The text of the JSON string that starts at `s` (after its opening quote), unescaped, and the
/// rest after its closing quote.
fn string(s: &str) -> Res<(String, &str)> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((out, &s[i + 1..])),
            '\\' => match chars.next() {
                Some((_, e @ ('"' | '\\' | '/'))) => out.push(e),
                Some((_, 'n')) => out.push('\n'),
                other => return Err(format!("unsupported escape {other:?} in {s:?}").into()),
            },
            c => out.push(c),
        }
    }
    Err(format!("unterminated string: {s:?}").into())
}

/// The raw text of `"key": VALUE` in one flat object line: a string unescaped, a number or an
/// array as written.
fn value(line: &str, key: &str) -> Res<Option<String>> {
    let tag = format!("\"{key}\": ");
    let Some(at) = line.find(&tag) else {
        return Ok(None);
    };
    let rest = &line[at + tag.len()..];
    if let Some(s) = rest.strip_prefix('"') {
        return Ok(Some(string(s)?.0));
    }
    let end = if rest.starts_with('[') {
        rest.find(']').map(|e| e + 1)
    } else {
        rest.find([',', '}'])
    };
    Ok(Some(rest[..end.unwrap_or(rest.len())].trim().to_owned()))
}

fn need(line: &str, key: &str) -> Res<String> {
    value(line, key)?.ok_or_else(|| format!("no {key:?} in {line:?}").into())
}

fn number<T: std::str::FromStr>(line: &str, key: &str) -> Res<T>
where
    T::Err: std::fmt::Display,
{
    let v = need(line, key)?;
    v.parse()
        .map_err(|e| format!("{key:?} is not a number ({e}): {v:?}").into())
}

/// `[a, b]`.
fn pair(line: &str, key: &str) -> Res<(f64, f64)> {
    let v = need(line, key)?;
    let inner = v.trim_start_matches('[').trim_end_matches(']');
    let mut it = inner.split(',').map(|x| x.trim().parse::<f64>());
    match (it.next(), it.next(), it.next()) {
        (Some(Ok(a)), Some(Ok(b)), None) => Ok((a, b)),
        _ => Err(format!("{key:?} is not a pair of numbers: {v:?}").into()),
    }
}

/// A paired difference as the results file writes it: median, its 95% interval, mean, its
/// 95% interval, rounds.
pub(crate) type PairedFields = (f64, (f64, f64), f64, (f64, f64), usize);

/// One record of a results file.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    pub(crate) scenario: String,
    pub(crate) imp: String,
    pub(crate) variant: String,
    pub(crate) mib: usize,
    pub(crate) bytes: usize,
    pub(crate) threads: usize,
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) unit: String,
    pub(crate) paired: Option<PairedFields>,
}

/// A results file: the machine's name, the driver, the date, and the records.
#[derive(Debug)]
pub(crate) struct Results {
    pub(crate) device: String,
    pub(crate) driver: String,
    pub(crate) date: String,
    pub(crate) rows: Vec<Row>,
}

/// A results file as `report::json` writes it: a header of `"device"`, `"driver"` and
/// `"date"`, then one flat record object per line.
pub(crate) fn parse(text: &str) -> Res<Results> {
    let header = |key: &str| -> Res<String> {
        text.lines()
            .filter(|l| !l.contains("\"scenario\""))
            .find_map(|l| value(l, key).ok().flatten())
            .ok_or_else(|| format!("no {key:?} in the results").into())
    };
    let mut rows = Vec::new();
    for line in text.lines().filter(|l| l.contains("\"scenario\": ")) {
        let paired = match value(line, "vs_raw_median")? {
            None => None,
            Some(_) => Some((
                number(line, "vs_raw_median")?,
                pair(line, "vs_raw_median_ci")?,
                number(line, "vs_raw_mean")?,
                pair(line, "vs_raw_mean_ci")?,
                number(line, "rounds")?,
            )),
        };
        rows.push(Row {
            scenario: need(line, "scenario")?,
            imp: need(line, "impl")?,
            variant: need(line, "variant")?,
            mib: number(line, "mib")?,
            bytes: number(line, "bytes")?,
            threads: number(line, "threads")?,
            median: number(line, "median")?,
            min: number(line, "min")?,
            unit: need(line, "unit")?,
            paired,
        });
    }
    if rows.is_empty() {
        return Err("no records in the results".into());
    }
    Ok(Results {
        device: header("device")?,
        driver: header("driver")?,
        date: header("date")?,
        rows,
    })
}
