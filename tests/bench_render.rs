//! The benchmark's `--render` (benches/um_bench/render.rs): a results file read back, on text.
//! The benchmark itself runs only on a GPU; what it reads again is checked here.

#[allow(dead_code)]
#[path = "../benches/um_bench/render.rs"]
mod render;

/// Two records as `report::json` writes them: escapes in strings, a paired difference on one.
const RESULTS: &str = r#"{
  "device": "NVIDIA \"H\\200\"",
  "driver": "13.0",
  "date": "2026-11-28",
  "records": [
    {"scenario": "alloc", "impl": "um, one \"process\"", "variant": "a, b", "mib": 1, "bytes": 4096, "threads": 2, "median": 1.2500, "min": 0.5000, "unit": "us", "vs_raw_median": 0.1250, "vs_raw_median_ci": [-0.5000, 0.7500], "vs_raw_mean": 0.2500, "vs_raw_mean_ci": [0.0000, 0.5000], "rounds": 100},
    {"scenario": "solver", "impl": "cpp", "variant": "cg1000000", "mib": 0, "bytes": 0, "threads": 0, "median": 12.0000, "min": 11.5000, "unit": "ms"}
  ]
}
"#;

#[test]
fn a_results_file_reads_back_field_by_field() {
    let r = render::parse(RESULTS).expect("parses");
    assert_eq!(
        (r.device.as_str(), r.driver.as_str(), r.date.as_str()),
        ("NVIDIA \"H\\200\"", "13.0", "2026-11-28")
    );
    assert_eq!(r.rows.len(), 2);
    let a = &r.rows[0];
    assert_eq!(
        (
            a.scenario.as_str(),
            a.imp.as_str(),
            a.variant.as_str(),
            a.unit.as_str()
        ),
        ("alloc", "um, one \"process\"", "a, b", "us")
    );
    assert_eq!(
        (a.mib, a.bytes, a.threads, a.median, a.min),
        (1, 4096, 2, 1.25, 0.5)
    );
    assert_eq!(a.paired, Some((0.125, (-0.5, 0.75), 0.25, (0.0, 0.5), 100)));
    let b = &r.rows[1];
    assert_eq!(
        (
            b.scenario.as_str(),
            b.imp.as_str(),
            b.unit.as_str(),
            b.median,
            b.min,
            b.paired
        ),
        ("solver", "cpp", "ms", 12.0, 11.5, None)
    );
}

#[test]
fn a_file_without_records_or_with_a_broken_field_is_refused() {
    assert!(render::parse("{\n  \"device\": \"x\"\n}\n").is_err());
    let broken = RESULTS.replace("\"median\": 12.0000", "\"median\": twelve");
    assert!(render::parse(&broken).is_err());
    let unterminated = RESULTS.replace("\"unit\": \"ms\"}", "\"unit\": \"ms}");
    assert!(render::parse(&unterminated).is_err());
}
