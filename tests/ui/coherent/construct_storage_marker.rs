// Rule 50 for the third storage: `Coherent` is a type, never a value: nothing can be built of
// it, and no other crate can add a storage.
fn main() {
    let _m = um::Coherent { _private: () };
}
