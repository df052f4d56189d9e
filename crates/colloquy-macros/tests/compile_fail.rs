//! What `#[function_tool]` refuses, with the messages a user reads (trybuild compares them
//! with `tests/ui/*.stderr`; `TRYBUILD=overwrite` rewrites them after a deliberate change).

#[test]
fn mistakes_are_refused_with_clear_messages() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}
