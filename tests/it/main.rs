//! colloquy's integration tests: one binary, one module per area, so `cargo test` links once.
//! The shared parts come first: `common` (the harness on the scripted LLM and the notation of
//! docs/scenarios.md) and `wire` (the provider tests' recorded streams, rule checkers and
//! session harness). docs/testing.md says how to add a test.

mod common;
mod wire;

mod agent_text;
mod anthropic;
mod approval;
mod background;
mod background_random;
mod before_call;
mod call_ids;
mod cancel_properties;
mod commands;
mod context;
mod control_properties;
mod controls;
mod deadlines;
mod dispatch;
mod doc_anchors;
mod drain;
mod duplicates;
mod durable;
mod end_call;
mod event_times;
mod examples;
mod failures;
mod first_program;
mod handoff;
mod host;
mod inspect;
mod interrupted;
mod lease;
mod limits;
mod mcp;
mod openai;
mod provider_mapping;
mod release;
mod retries;
mod run;
mod scenarios;
mod schema_fuzz;
mod session;
mod smoke;
mod speech;
mod suspend;
mod testing_guide;
mod tool_proxy;
mod tool_search;
mod toolsets;
mod tracing_spans;
mod turn_budget;
mod user_input;
