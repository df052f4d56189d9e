//! What a tool returns and how it becomes the text the model sees (§4 and
//! decisions 1, 2, 13, 18).
//!
//! A tool body returns `Result<R, ToolError>` with `R: IntoToolOutput`. Strings are used as
//! they are; other values render as compact JSON; `()`, `None` and [`StopResponse`] give an
//! empty output that asks for no reply; [`ToolResult`] sets `reply_required` explicitly.

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::agent::Agent;
use crate::tool_error::ToolError;

/// A tool's successful output, before it becomes a chat item.
#[derive(Clone, Debug)]
pub struct ToolOutput {
    /// The rendered text; `None` when the tool returned nothing (empty output, ended message
    /// `null`).
    pub text: Option<String>,
    /// Whether the model should reply to this output.
    pub reply_required: bool,
    /// An agent to hand the conversation to (§4, [`Handoff`]).
    pub handoff: Option<Arc<Agent>>,
}

impl ToolOutput {
    /// A text output that asks for a reply.
    pub fn text(text: impl Into<String>) -> Self {
        Self { text: Some(text.into()), reply_required: true, handoff: None }
    }

    /// The empty output that asks for no reply.
    pub fn nothing() -> Self {
        Self { text: None, reply_required: false, handoff: None }
    }

    /// The text the model sees (empty for nothing).
    pub fn output_text(&self) -> &str {
        self.text.as_deref().unwrap_or("")
    }
}

/// Return this to answer the call with an empty output and ask for no reply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StopResponse;

/// An output with an explicit `reply_required` (decision 15): keep an output in history
/// without asking the model to reply to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolResult {
    /// The output text.
    pub output: String,
    /// Whether the model should reply.
    pub reply_required: bool,
}

/// Return this to hand the conversation to another agent (§4, §11.3): alone, the call's output
/// is empty and asks for no reply; with a `result`, the current agent speaks its reply to it
/// (with `tool_choice = none`) before the switch (C-92).
///
/// ```
/// use colloquy_model::{Agent, Handoff, IntoToolOutput};
/// let out = Handoff::to(Agent::new("billing", "You handle billing.")).with_result("transferring you")
///     .into_tool_output().unwrap();
/// assert_eq!(out.output_text(), "transferring you");
/// assert_eq!(out.handoff.unwrap().id(), "billing");
/// ```
#[derive(Clone, Debug)]
pub struct Handoff {
    agent: Agent,
    result: Option<String>,
}

impl Handoff {
    /// Hand off to `agent`.
    pub fn to(agent: Agent) -> Self {
        Self { agent, result: None }
    }

    /// Also answer the call with `result`.
    pub fn with_result(mut self, result: impl Into<String>) -> Self {
        self.result = Some(result.into());
        self
    }
}

impl IntoToolOutput for Handoff {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        let reply_required = self.result.is_some();
        Ok(ToolOutput { text: self.result, reply_required, handoff: Some(Arc::new(self.agent)) })
    }
}

/// Wraps any serializable value so it renders as compact JSON.
///
/// ```
/// use colloquy_model::{IntoToolOutput, Json};
/// #[derive(serde::Serialize)]
/// struct Booking { confirmation: &'static str }
/// let out = Json(Booking { confirmation: "FL-1" }).into_tool_output().unwrap();
/// assert_eq!(out.output_text(), r#"{"confirmation":"FL-1"}"#);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Json<T>(pub T);

/// Text the model sees when a value cannot be rendered.
pub const INVALID_OUTPUT: &str = "the tool returned an invalid output";

/// Conversion of a tool's return value into a [`ToolOutput`].
pub trait IntoToolOutput {
    /// Renders the value; an unrenderable value is an error output.
    fn into_tool_output(self) -> Result<ToolOutput, ToolError>;
}

impl IntoToolOutput for ToolOutput {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        Ok(self)
    }
}

impl IntoToolOutput for String {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(self))
    }
}

impl IntoToolOutput for &str {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(self))
    }
}

impl IntoToolOutput for () {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::nothing())
    }
}

impl IntoToolOutput for StopResponse {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::nothing())
    }
}

impl IntoToolOutput for ToolResult {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput {
            text: Some(self.output),
            reply_required: self.reply_required,
            handoff: None,
        })
    }
}

impl IntoToolOutput for Value {
    /// A JSON string is used as is; any other value renders as compact JSON (`null` included).
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        match self {
            Value::String(s) => Ok(ToolOutput::text(s)),
            other => Ok(ToolOutput::text(other.to_string())),
        }
    }
}

impl<T: Serialize> IntoToolOutput for Json<T> {
    /// As the value's [`Value`] would render, written straight to text (a `Value` first would
    /// copy the whole result): a JSON string is used as is, anything else is compact JSON.
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        let invalid = |e: serde_json::Error| ToolError::new(format!("{INVALID_OUTPUT}: {e}"));
        let text = serde_json::to_string(&self.0).map_err(invalid)?;
        if text.starts_with('"') {
            return serde_json::from_str::<String>(&text).map(ToolOutput::text).map_err(invalid);
        }
        Ok(ToolOutput::text(text))
    }
}

impl<T: IntoToolOutput> IntoToolOutput for Option<T> {
    /// `None` is "nothing" (decision 2); `Some(v)` renders `v`.
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        match self {
            Some(v) => v.into_tool_output(),
            None => Ok(ToolOutput::nothing()),
        }
    }
}

macro_rules! display_output {
    ($($t:ty),*) => {$(
        impl IntoToolOutput for $t {
            fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
                Ok(ToolOutput::text(self.to_string()))
            }
        }
    )*};
}
display_output!(bool, i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);

macro_rules! float_output {
    ($($t:ty),*) => {$(
        impl IntoToolOutput for $t {
            /// Rendered as JSON renders it (`1.0`, `0.5`); NaN and infinities are invalid.
            fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
                Json(self).into_tool_output().and_then(|out| match out.output_text() {
                    "null" => Err(ToolError::new(INVALID_OUTPUT)),
                    _ => Ok(out),
                })
            }
        }
    )*};
}
float_output!(f32, f64);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn render<T: IntoToolOutput>(v: T) -> (String, bool) {
        let out = v.into_tool_output().unwrap();
        (out.output_text().to_string(), out.reply_required)
    }

    #[test]
    fn strings_are_used_as_is() {
        assert_eq!(render("sunny in Tokyo"), ("sunny in Tokyo".into(), true));
        assert_eq!(render(json!("plain")), ("plain".into(), true));
    }

    #[test]
    fn maps_render_as_compact_json_in_key_order() {
        let v = json!({"confirmation": "FL-1", "seats": 2});
        assert_eq!(render(v), (r#"{"confirmation":"FL-1","seats":2}"#.into(), true));
    }

    #[test]
    fn json_renders_as_its_value_would() {
        #[derive(Serialize)]
        struct Booking {
            confirmation: &'static str,
            seats: u8,
        }
        let booking = Booking { confirmation: "FL-\"1\"", seats: 2 };
        assert_eq!(render(Json(booking)).0, r#"{"confirmation":"FL-\"1\"","seats":2}"#);
        assert_eq!(render(Json("say \"hi\"\n")).0, "say \"hi\"\n", "a string is used as is");
        assert_eq!(render(Json(json!({"b": 1, "a": [true]}))).0, r#"{"b":1,"a":[true]}"#);
        let keyed: BTreeMap<u8, bool> = [(1, true)].into();
        assert_eq!(render(Json(keyed)).0, r#"{"1":true}"#);
    }

    #[test]
    fn falsy_values_render_and_ask_for_a_reply() {
        assert_eq!(render(0i64), ("0".into(), true));
        assert_eq!(render(false), ("false".into(), true));
        assert_eq!(render(""), ("".into(), true));
        assert_eq!(render(json!([])), ("[]".into(), true));
        assert_eq!(render(Value::Null), ("null".into(), true));
        assert_eq!(render(1.0f64), ("1.0".into(), true));
    }

    #[test]
    fn nothing_asks_for_no_reply() {
        assert_eq!(render(()), ("".into(), false));
        assert_eq!(render(StopResponse), ("".into(), false));
        assert_eq!(render(None::<String>), ("".into(), false));
        assert_eq!(().into_tool_output().unwrap().text, None);
    }

    #[test]
    fn tool_result_sets_reply_required() {
        let r = ToolResult { output: "kept".into(), reply_required: false };
        assert_eq!(render(r), ("kept".into(), false));
    }

    #[test]
    fn non_finite_floats_are_invalid_outputs() {
        let err = f64::NAN.into_tool_output().unwrap_err();
        assert_eq!(err.model_text(), INVALID_OUTPUT);
    }
}
