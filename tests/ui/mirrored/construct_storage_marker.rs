// Rule 50: storage markers are types, never values: nothing can be built of them.
fn main() {
    let _m = um::Mirror { _private: () };
}
