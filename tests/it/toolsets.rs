//! Toolsets: plain ones group tools, async ones run their calls in a toolset actor of their own
//! with their own templates, session-scoped when placed on the session (decision 16).

use crate::common::*;
use colloquy::prelude::*;
use colloquy::templates::Templates;

fn lookup(name: &'static str, ms: u64) -> FunctionTool {
    FunctionTool::new(name, "Looks up.", move |ctx: RunContext, _a: NoArgs| async move {
        ctx.update("lookup started").await?;
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        Ok::<_, ToolError>("lookup done")
    })
}

fn tmpl(update: &str) -> Templates {
    Templates { update: Some(update.into()), ..Default::default() }
}

#[tokio::test(start_paused = true)]
async fn a_session_scoped_async_toolset_reports_to_the_current_agent() {
    let shared = Toolset::new_async("shared").tool(lookup("long_lookup", 500));
    let builder = Session::builder().toolset(shared);
    let mut h = Harness::start_with(
        builder,
        Agent::new("A", "inst").tool(sleeper("local", 10, "local done")),
        vec![call("l", "long_lookup", "{}"), text("Looking."), text("Found it.")],
    )
    .await;
    h.turn("look it up").await;
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    let reqs = h.requests();
    assert_eq!(reqs[0].tools, ["long_lookup", "local"], "session tools come first");
    assert_eq!(reqs[2].kind, colloquy::llm::RequestKind::DeferredReply);
    let ctx = h.ctx("A").await;
    assert_eq!(
        ctx[ctx.len() - 3..],
        [
            "call(long_lookup#l_final {})",
            r#"out(#l_final,"lookup done",ok,rr=T)"#,
            "asst(Found it.)",
        ]
    );
    let handoffs: Vec<bool> = h
        .events()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolReplyUpdated { handoff, .. } => Some(*handoff),
            _ => None,
        })
        .collect();
    assert_eq!(handoffs, [false, false]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn templates_resolve_toolset_then_agent_then_session() {
    let agent_set = Toolset::new_async("agent_set")
        .tool(lookup("in_agent_set", 10))
        .templates(tmpl("T: {message}"));
    let session_set = Toolset::new_async("session_set").tool(lookup("in_session_set", 10));
    let agent = Agent::new("A", "inst")
        .tool(lookup("plain", 10))
        .toolset(agent_set)
        .templates(tmpl("A: {message}"));
    let builder = Session::builder().toolset(session_set).templates(tmpl("S: {message}"));
    let h = Harness::start_with(
        builder,
        agent,
        vec![ScriptedResponse::calls([
            ScriptedCall::new("p", "plain", "{}"),
            ScriptedCall::new("t", "in_agent_set", "{}"),
            ScriptedCall::new("s", "in_session_set", "{}"),
        ])],
    )
    .await;
    h.turn("go").await;
    let ctx = h.ctx("A").await;
    // The agent's implicit toolset uses the agent's templates; an agent-scoped async toolset
    // its own; a session-scoped one skips the agent and falls back to the session's.
    assert!(ctx.contains(&r#"out(#p,"A: lookup started",ok,rr=T)"#.to_string()), "{ctx:?}");
    assert!(ctx.contains(&r#"out(#t,"T: lookup started",ok,rr=T)"#.to_string()), "{ctx:?}");
    assert!(ctx.contains(&r#"out(#s,"S: lookup started",ok,rr=T)"#.to_string()), "{ctx:?}");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn plain_toolsets_group_tools_and_ids_must_be_unique() {
    let plain =
        Toolset::new("weather").tool(sleeper("forecast", 5, "rain")).tool(sleeper("now", 5, "sun"));
    let h = Harness::start_with(
        Session::builder().toolset(plain),
        Agent::new("A", "inst").tool(sleeper("book", 5, "booked")),
        vec![call("f", "forecast", "{}")],
    )
    .await;
    h.turn("weather?").await;
    assert_eq!(h.requests()[0].tools, ["forecast", "now", "book"]);
    assert!(h.ctx("A").await.contains(&r#"out(#f,"rain",ok,rr=T)"#.to_string()));
    h.close().await;

    let clash = Session::builder()
        .llm(ScriptedLlm::new([]))
        .toolset(Toolset::new_async("x").tool(sleeper("one", 1, "1")))
        .start(
            Agent::new("A", "inst").toolset(Toolset::new_async("x").tool(sleeper("two", 1, "2"))),
        )
        .await;
    match clash {
        Err(SessionError::Config(text)) => assert_eq!(text, "duplicate toolset id: x"),
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("two async toolsets named x must not start"),
    }
}

/// A tool source listing fixed tools (an MCP server's stand-in).
#[derive(Debug)]
struct Listing(std::sync::Arc<[FunctionTool]>);

impl colloquy::tools::ToolSource for Listing {
    fn tools(&self) -> std::sync::Arc<[FunctionTool]> {
        std::sync::Arc::clone(&self.0)
    }

    fn ready(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(async { Ok(()) })
    }
}

fn answering(name: &'static str, answer: &'static str) -> FunctionTool {
    FunctionTool::new(name, "Answers.", move |_ctx: RunContext, _a: NoArgs| async move {
        Ok::<_, ToolError>(answer)
    })
}

#[tokio::test(start_paused = true)]
async fn a_learned_tool_renamed_for_the_current_agent_runs_in_a_session_scoped_toolset() {
    // The session's toolset learns `lookup`; agent B has a `lookup` of its own, so B's model
    // sees the learned one as `src_lookup` — and calling it runs the learned tool, though the
    // toolset actor was started with agent A's catalog.
    let listed: std::sync::Arc<[FunctionTool]> =
        vec![answering("lookup", "from the source")].into();
    let source = Toolset::new_async("src").source(std::sync::Arc::new(Listing(listed)));
    let b = Agent::new("B", "inst B").tool(answering("lookup", "B's own"));
    let script = vec![
        text("Hello from A."),
        ScriptedResponse::calls([
            ScriptedCall::new("c1", "lookup", "{}"),
            ScriptedCall::new("c2", "src_lookup", "{}"),
        ]),
        text("Both answered."),
    ];
    let h = Harness::start_with(Session::builder().toolset(source), agent(), script).await;
    h.turn("hi").await;
    assert!(h.requests()[0].tools.contains(&"lookup".to_string()), "A sees the source's name");
    h.session.update_agent(b).await.unwrap();
    h.turn("look it up").await;
    let tools = h.requests()[1].tools.clone();
    assert!(tools.contains(&"src_lookup".to_string()), "{tools:?}");
    let hist = h.hist().await;
    assert!(hist.contains(&r#"out(#c1,"B's own",ok,rr=T)"#.to_string()), "{hist:#?}");
    assert!(hist.contains(&r#"out(#c2,"from the source",ok,rr=T)"#.to_string()), "{hist:#?}");
    h.close().await;
}
