// Rules 250 and 252: a span comes only from `TimeMark::until`, which checks that both marks are
// of one context and in order, and holds both events; there is no other way to make one (no
// public field, no constructor, no `Default`). Expected: an error, `TimeSpan` cannot be built
// with a struct literal (private fields).
use um::TimeSpan;

fn main() {
    let span = TimeSpan {};
    let _ = span.try_elapsed();
}
