//! A bad scenario file is refused before anything runs, with an error naming the JSON path.

use colloquy_scenario::{ScenarioError, run_str};

fn file_error(text: &str) -> String {
    match run_str(text) {
        Err(ScenarioError::File(message)) => message,
        Err(other) => panic!("expected a file error, got {other}"),
        Ok(_) => panic!("expected a file error, the scenario ran"),
    }
}

const MINIMAL: &str = r#""agents": {"A": {}}, "session": {"agent": "A"}"#;

#[test]
fn unknown_keys_are_named_with_their_path() {
    let text = format!(r#"{{"tools": {{"silent": {{"bodyy": []}}}}, {MINIMAL}}}"#);
    assert_eq!(file_error(&text), "tools.silent.bodyy: unknown key");
    let text =
        format!(r#"{{"tools": {{"t": {{"body": [{{"sleep_ms": 5, "x": 1}}]}}}}, {MINIMAL}}}"#);
    assert_eq!(file_error(&text), "tools.t.body[0]: a body step needs exactly one action");
    let text = format!(r#"{{{MINIMAL}, "steps": [{{"usr": "hi"}}]}}"#);
    assert_eq!(file_error(&text), "steps[0].usr: unknown key");
    assert_eq!(file_error(&format!(r#"{{{MINIMAL}, "extra": 1}}"#)), "extra: unknown key");
}

#[test]
fn bad_references_and_kinds_name_their_path() {
    let handoff = format!(r#"{{"tools": {{"t": {{"body": [{{"handoff": "B"}}]}}}}, {MINIMAL}}}"#);
    assert_eq!(file_error(&handoff), "tools.t.body[0].handoff: undefined agent `B`");
    let toolset = format!(
        r#"{{"toolsets": {{"s": {{"kind": "tool_search", "strategy": "magic"}}}}, {MINIMAL}}}"#
    );
    assert_eq!(file_error(&toolset), "toolsets.s.strategy: unknown strategy `magic`");
    let nested =
        format!(r#"{{"toolsets": {{"s": {{"kind": "plain", "toolsets": ["s"]}}}}, {MINIMAL}}}"#);
    assert_eq!(file_error(&nested), "toolsets.s.toolsets: a toolset contains itself");
    let missing = format!(
        r#"{{"toolsets": {{"s": {{"kind": "tool_proxy", "toolsets": ["w"]}}}}, {MINIMAL}}}"#
    );
    assert_eq!(file_error(&missing), "toolsets.s.toolsets[0]: undefined toolset `w`");
    let inspect = format!(r#"{{{MINIMAL}, "steps": [{{"at_ms": 5, "inspect": false}}]}}"#);
    assert_eq!(file_error(&inspect), "steps[0].inspect: expected true");
    let on_enter = r#"{"agents": {"A": {"on_enter": {"say": "hi"}}}, "session": {"agent": "A"}}"#;
    assert_eq!(file_error(on_enter), "agents.A.on_enter.say: unknown key");
}

#[test]
fn references_must_resolve() {
    let tool = r#"{"agents": {"A": {"tools": ["nope"]}}, "session": {"agent": "A"}}"#;
    assert_eq!(file_error(tool), "agents.A.tools[0]: undefined tool `nope`");
    let agent = r#"{"agents": {"A": {}}, "session": {"agent": "B"}}"#;
    assert_eq!(file_error(agent), "session.agent: undefined agent `B`");
    let placeholder =
        format!(r#"{{"tools": {{"t": {{"body": [{{"return": "hi {{who}}"}}]}}}}, {MINIMAL}}}"#);
    assert_eq!(file_error(&placeholder), "tools.t.body[0].return: unknown placeholder `{who}`");
}

#[test]
fn structure_errors_are_caught() {
    assert!(file_error("not json").starts_with("not valid JSON"));
    assert_eq!(file_error(r#"{"agents": {"A": {}}}"#), "session: missing");
    let after_close = format!(r#"{{{MINIMAL}, "steps": [{{"close": true}}, {{"say": "x"}}]}}"#);
    assert_eq!(file_error(&after_close), "steps[1]: no step may follow `close`");
    let unreachable = format!(
        r#"{{"tools": {{"t": {{"body": [{{"return": 1}}, {{"sleep_ms": 1}}]}}}}, {MINIMAL}}}"#
    );
    assert_eq!(
        file_error(&unreachable),
        "tools.t.body[1]: unreachable: the step before it ends the body"
    );
    let wrong_type = format!(r#"{{"options": {{"max_tool_steps": "3"}}, {MINIMAL}}}"#);
    assert_eq!(
        file_error(&wrong_type),
        "options.max_tool_steps: expected a non-negative integer, got a string"
    );
}

#[test]
fn an_explicit_close_ends_the_scenario_with_reason_close() {
    let file = format!(r#"{{{MINIMAL}, "steps": [{{"say": "bye"}}, {{"close": true}}]}}"#);
    let trace = run_str(&file).unwrap();
    let last = trace.events.last().unwrap();
    assert_eq!(serde_json::to_value(last).unwrap()["reason"], "close");
}

#[test]
fn a_tool_schema_that_could_not_be_validated_is_refused_when_read() {
    let cyclic = format!(
        r##"{{"tools": {{"t": {{"parameters": {{"allOf": [{{"$ref": "#"}}]}}}}}}, {MINIMAL}}}"##
    );
    assert_eq!(
        file_error(&cyclic),
        "tools.t.parameters: the schema refers to itself without consuming input (at `#`): \
         validation would never end"
    );
    let dangling = format!(
        r##"{{"tools": {{"t": {{"parameters": {{"properties": {{"a": {{"$ref": "#/$defs/x"}}}}}}}}}}, {MINIMAL}}}"##
    );
    assert_eq!(
        file_error(&dangling),
        "tools.t.parameters: the schema reference `#/$defs/x` points to nothing in the schema"
    );
}

#[test]
fn a_duplicate_scope_names_declared_properties_only() {
    let tool = |scope: &str| {
        format!(
            r#"{{"tools": {{"refund": {{"parameters": {{"type": "object", "properties":
                {{"order_id": {{"type": "string"}}, "amount": {{"type": "number"}}}}}},
                "on_duplicate": "reject", "duplicate_scope": {scope}}}}}, {MINIMAL}}}"#
        )
    };
    assert_eq!(
        file_error(&tool(r#"["order_id", "orderid"]"#)),
        "tools.refund.duplicate_scope[1]: `orderid` is not a declared property"
    );
    assert_eq!(
        file_error(&tool("[]")),
        r#"tools.refund.duplicate_scope: name at least one argument (or use "name")"#
    );
    assert_eq!(
        file_error(&tool("[5]")),
        "tools.refund.duplicate_scope[0]: expected a string, got a number"
    );
    assert_eq!(
        file_error(&tool(r#""order_id""#)),
        "tools.refund.duplicate_scope: unknown scope `order_id`"
    );
    assert_eq!(
        file_error(&tool("{}")),
        r#"tools.refund.duplicate_scope: expected "name", "name_and_args" or an array of argument names, got an object"#
    );
    assert!(run_str(&tool(r#"["order_id"]"#)).is_ok(), "a declared name is read");
}

#[test]
fn between_a_crash_and_its_resume_only_waits_may_come() {
    let steps = |steps: &str| format!(r#"{{"steps": [{steps}], {MINIMAL}}}"#);
    let early = steps(r#"{"resume": true}"#);
    assert_eq!(file_error(&early), "steps[0]: `resume` needs a `crash` before it");
    let talking = steps(r#"{"crash": true}, {"user": "hello?"}, {"resume": true}"#);
    assert_eq!(
        file_error(&talking),
        "steps[1]: the session has crashed: only waits until `resume`"
    );
    let ended = steps(r#"{"crash": true}, {"wait_ms": 5}"#);
    assert_eq!(file_error(&ended), "steps: the scenario ends crashed: `resume` it");
    let fine = steps(r#"{"crash": true}, {"wait_ms": 5}, {"resume": true}, {"wait_idle": true}"#);
    assert!(run_str(&fine).is_ok(), "a crash and its resume play");
}

#[test]
fn an_on_interrupted_policy_is_one_of_three() {
    let tool = |policy: &str| {
        format!(r#"{{"tools": {{"t": {{"on_interrupted": "{policy}"}}}}, {MINIMAL}}}"#)
    };
    assert_eq!(
        file_error(&tool("retry")),
        "tools.t.on_interrupted: `retry` is no on_interrupted policy: fail, rerun or ask"
    );
    for policy in ["fail", "rerun", "ask"] {
        assert!(run_str(&tool(policy)).is_ok(), "`{policy}` is read");
    }
}

#[test]
fn concurrency_caps_and_memory_windows_must_be_positive() {
    let tool = format!(r#"{{"tools": {{"t": {{"max_concurrent": 0}}}}, {MINIMAL}}}"#);
    assert_eq!(file_error(&tool), "tools.t.max_concurrent: must be at least 1");
    let window = format!(r#"{{"tools": {{"t": {{"idempotent_ms": 0}}}}, {MINIMAL}}}"#);
    assert_eq!(file_error(&window), "tools.t.idempotent_ms: must be at least 1 ms");
    let search = format!(
        r#"{{"toolsets": {{"s": {{"kind": "tool_search", "max_concurrent": 2}}}}, {MINIMAL}}}"#
    );
    assert_eq!(
        file_error(&search),
        "toolsets.s.max_concurrent: only async and plain toolsets take it"
    );
}

#[test]
fn a_user_input_step_needs_a_string() {
    let number = format!(r#"{{{MINIMAL}, "steps": [{{"user_input": 5}}]}}"#);
    assert_eq!(file_error(&number), "steps[0].user_input: expected a string, got a number");
    let both = format!(r#"{{{MINIMAL}, "steps": [{{"user_input": "hi", "user": "hi"}}]}}"#);
    assert_eq!(file_error(&both), "steps[0]: a step needs exactly one action");
}
