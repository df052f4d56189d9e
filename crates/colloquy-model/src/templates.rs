//! Prompt templates (§8, decisions 17 and 18): a format string with named
//! placeholders in braces (`{{` and `}}` are literal braces) or a closure over the placeholder
//! map. `{call_ids}` renders as a JSON array.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, LazyLock};

/// The default texts of decision 18.
pub mod defaults {
    /// Wraps a string progress update.
    pub const UPDATE: &str = "Progress from `{function_name}`: {message}\nThe tool is still working. Share only what this update says and do not guess the final result.";
    /// Answers a rejected duplicate. `{cancel_hint}` is [`REJECT_CANCEL_HINT`] when a running
    /// duplicate can be cancelled (the model is offered `lk_agents_cancel_task`), else empty.
    pub const DUPLICATE_REJECT: &str =
        "`{function_name}` is already running:\n{fnc_calls_text}{cancel_hint}";
    /// Answers an unconfirmed duplicate. `{cancel_hint}` is [`CONFIRM_CANCEL_HINT`] when a
    /// running duplicate can be cancelled, else [`CONFIRM_ONLY_HINT`].
    pub const DUPLICATE_CONFIRM: &str = "`{function_name}` is already running:\n{fnc_calls_text}\nIf the user really wants another run, call it again with `lk_agents_confirm_duplicate` set to true.{cancel_hint}";
    /// `{cancel_hint}` of a rejected duplicate that can be cancelled.
    pub const REJECT_CANCEL_HINT: &str = "\nTo stop it, call `lk_agents_cancel_task` with its call_id, but only if the user explicitly asks.";
    /// `{cancel_hint}` of an unconfirmed duplicate that can be cancelled.
    pub const CONFIRM_CANCEL_HINT: &str = " To stop the running one instead, call `lk_agents_cancel_task` with its call_id. Do either only when the user explicitly asks.";
    /// `{cancel_hint}` of an unconfirmed duplicate that cannot be cancelled.
    pub const CONFIRM_ONLY_HINT: &str = " Do this only when the user explicitly asks.";
    /// The provisional output of a call waiting for approval. Role-neutral: whoever approves
    /// (an operator, a policy service, the user) is the host's business.
    pub const APPROVAL_WAITING: &str = "`{function_name}` needs approval before it runs; it has not run yet. Its result will follow.";
    /// What the model reads for a call that was not approved (`reason`: the approver's text, or
    /// why nobody answered).
    pub const APPROVAL_REJECTED: &str = "`{function_name}` was not approved: {reason}";
    /// The provisional output of a call waiting for a place under a concurrency cap.
    pub const QUEUED: &str = "`{function_name}` waits for other calls of its kind to finish; it has not run yet. Its result will follow.";
    /// Deferred-reply instructions when the pending items are the last ones.
    pub const REPLY_AT_TAIL: &str = "Background tool calls have new results (call ids: {call_ids}). Tell the user about them naturally, without repeating anything already said.";
    /// Deferred-reply instructions when newer items exist.
    pub const REPLY_MAYBE_COVERED: &str = "Background tool calls have new results (call ids: {call_ids}). You may already have mentioned some of them. If everything was already said, reply with nothing at all. Otherwise mention only what is new, with a natural transition, and never repeat yourself.";
}

/// The values a template is rendered with.
pub type Placeholders = BTreeMap<&'static str, String>;

type Render = dyn Fn(&Placeholders) -> String + Send + Sync;

/// A template: a format string or a closure.
///
/// ```
/// use colloquy_model::templates::{Template, Placeholders};
/// let t = Template::text("[{function_name}] {message}");
/// let mut p = Placeholders::new();
/// p.insert("function_name", "book".into());
/// p.insert("message", "searching".into());
/// assert_eq!(t.render(&p).unwrap(), "[book] searching");
/// let f = Template::func(|p| format!("{}!", p["message"]));
/// assert_eq!(f.render(&p).unwrap(), "searching!");
/// ```
#[derive(Clone)]
pub enum Template {
    /// A format string with `{placeholder}`s.
    Text(Arc<str>),
    /// A closure receiving the placeholder map.
    Func(Arc<Render>),
}

impl Template {
    /// A format-string template.
    pub fn text(text: impl Into<Arc<str>>) -> Self {
        Template::Text(text.into())
    }

    /// A closure template.
    pub fn func(f: impl Fn(&Placeholders) -> String + Send + Sync + 'static) -> Self {
        Template::Func(Arc::new(f))
    }

    /// Renders; an unknown placeholder or a stray brace is an error naming it.
    pub fn render(&self, values: &Placeholders) -> Result<String, TemplateError> {
        match self {
            Template::Func(f) => Ok(f(values)),
            Template::Text(text) => render_text(text, |name| values.get(name).map(String::as_str)),
        }
    }

    /// [`render`](Self::render) with the values as `(name, value)` pairs: a format string
    /// looks them up where it needs them, and only a closure gets them as a map (the runtime
    /// renders an update template for every progress update).
    ///
    /// ```
    /// use colloquy_model::templates::Template;
    /// let t = Template::text("[{function_name}] {message}");
    /// let out = t.render_with(&[("function_name", "book"), ("message", "searching")]);
    /// assert_eq!(out.unwrap(), "[book] searching");
    /// ```
    pub fn render_with(&self, values: &[(&'static str, &str)]) -> Result<String, TemplateError> {
        match self {
            Template::Func(f) => Ok(f(&values.iter().map(|(k, v)| (*k, v.to_string())).collect())),
            Template::Text(text) => {
                render_text(text, |name| values.iter().find(|(k, _)| *k == name).map(|(_, v)| *v))
            }
        }
    }
}

impl fmt::Debug for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Template::Text(t) => f.debug_tuple("Text").field(t).finish(),
            Template::Func(_) => f.write_str("Func(..)"),
        }
    }
}

impl From<&str> for Template {
    fn from(text: &str) -> Self {
        Template::text(text)
    }
}

impl From<String> for Template {
    fn from(text: String) -> Self {
        Template::text(text)
    }
}

/// A template that could not be rendered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot render template: {0}")]
pub struct TemplateError(pub String);

fn render_text<'v>(
    text: &str,
    value: impl Fn(&str) -> Option<&'v str>,
) -> Result<String, TemplateError> {
    let mut out = String::with_capacity(text.len() + 64);
    // Literal runs are copied whole; only braces are looked at one by one (they are ASCII, so
    // every index below is a char boundary).
    let bytes = text.as_bytes();
    let mut literal = 0;
    let mut i = 0;
    while let Some(found) = memchr::memchr2(b'{', b'}', &bytes[i..]) {
        i += found;
        match bytes[i] {
            b @ (b'{' | b'}') if bytes.get(i + 1) == Some(&b) => {
                out.push_str(&text[literal..=i]);
                i += 2;
                literal = i;
            }
            b'{' => {
                out.push_str(&text[literal..i]);
                let rest = &text[i + 1..];
                let Some(len) = rest.find('}') else {
                    return Err(TemplateError(format!("unclosed `{{{rest}`")));
                };
                let name = &rest[..len];
                match value(name) {
                    Some(v) => out.push_str(v),
                    None => return Err(TemplateError(format!("unknown placeholder `{{{name}}}`"))),
                }
                i += len + 2;
                literal = i;
            }
            _ => return Err(TemplateError("single `}` (write `}}`)".into())),
        }
    }
    out.push_str(&text[literal..]);
    Ok(out)
}

/// The five templates of §8 and the three of tool control (decision 69); `None` means "not
/// set here".
#[derive(Clone, Debug, Default)]
pub struct Templates {
    /// Wraps string progress updates (`function_name`, `call_id`, `message`).
    pub update: Option<Template>,
    /// Rejected duplicate (`function_name`, `fnc_calls_json`, `fnc_calls_text`,
    /// `cancel_hint`).
    pub duplicate_reject: Option<Template>,
    /// Unconfirmed duplicate (same placeholders).
    pub duplicate_confirm: Option<Template>,
    /// A call waiting for approval, its provisional output (`function_name`, `call_id`).
    pub approval_waiting: Option<Template>,
    /// A call that was not approved (`function_name`, `call_id`, `reason`).
    pub approval_rejected: Option<Template>,
    /// A call waiting for a place under its concurrency cap, its provisional output
    /// (`function_name`, `call_id`).
    pub queued: Option<Template>,
    /// Deferred reply at tail (`call_ids`).
    pub reply_at_tail: Option<Template>,
    /// Deferred reply maybe covered (`call_ids`).
    pub reply_maybe_covered: Option<Template>,
}

/// Templates with every key resolved.
#[derive(Clone, Debug)]
pub struct ResolvedTemplates {
    /// See [`Templates::update`].
    pub update: Template,
    /// See [`Templates::duplicate_reject`].
    pub duplicate_reject: Template,
    /// See [`Templates::duplicate_confirm`].
    pub duplicate_confirm: Template,
    /// See [`Templates::approval_waiting`].
    pub approval_waiting: Template,
    /// See [`Templates::approval_rejected`].
    pub approval_rejected: Template,
    /// See [`Templates::queued`].
    pub queued: Template,
    /// See [`Templates::reply_at_tail`].
    pub reply_at_tail: Template,
    /// See [`Templates::reply_maybe_covered`].
    pub reply_maybe_covered: Template,
}

impl Default for ResolvedTemplates {
    fn default() -> Self {
        Templates::default().over_defaults()
    }
}

/// The module defaults as templates, made once: every toolset and session shares their text
/// (each would otherwise hold its own copy, about 2 KB an idle session).
fn shared_defaults() -> &'static ResolvedTemplates {
    static DEFAULTS: LazyLock<ResolvedTemplates> = LazyLock::new(|| ResolvedTemplates {
        update: Template::text(defaults::UPDATE),
        duplicate_reject: Template::text(defaults::DUPLICATE_REJECT),
        duplicate_confirm: Template::text(defaults::DUPLICATE_CONFIRM),
        approval_waiting: Template::text(defaults::APPROVAL_WAITING),
        approval_rejected: Template::text(defaults::APPROVAL_REJECTED),
        queued: Template::text(defaults::QUEUED),
        reply_at_tail: Template::text(defaults::REPLY_AT_TAIL),
        reply_maybe_covered: Template::text(defaults::REPLY_MAYBE_COVERED),
    });
    &DEFAULTS
}

impl Templates {
    /// These templates merged over the module defaults.
    pub fn over_defaults(&self) -> ResolvedTemplates {
        let pick = |t: &Option<Template>, d: &Template| t.as_ref().unwrap_or(d).clone();
        let d = shared_defaults();
        ResolvedTemplates {
            update: pick(&self.update, &d.update),
            duplicate_reject: pick(&self.duplicate_reject, &d.duplicate_reject),
            duplicate_confirm: pick(&self.duplicate_confirm, &d.duplicate_confirm),
            approval_waiting: pick(&self.approval_waiting, &d.approval_waiting),
            approval_rejected: pick(&self.approval_rejected, &d.approval_rejected),
            queued: pick(&self.queued, &d.queued),
            reply_at_tail: pick(&self.reply_at_tail, &d.reply_at_tail),
            reply_maybe_covered: pick(&self.reply_maybe_covered, &d.reply_maybe_covered),
        }
    }

    /// §8 resolution, "most specific wins, whole value": the first level that sets templates
    /// at all, merged over the defaults (not over the levels below it).
    pub fn resolve(levels: &[Option<&Templates>]) -> ResolvedTemplates {
        levels.iter().flatten().next().map(|t| t.over_defaults()).unwrap_or_default()
    }
}

/// Placeholders for the update template.
pub fn update_placeholders(function_name: &str, call_id: &str, message: &str) -> Placeholders {
    update_values(function_name, call_id, message)
        .iter()
        .map(|(k, v)| (*k, v.to_string()))
        .collect()
}

/// The update template's placeholders as pairs, for [`Template::render_with`].
pub fn update_values<'a>(
    function_name: &'a str,
    call_id: &'a str,
    message: &'a str,
) -> [(&'static str, &'a str); 3] {
    [("function_name", function_name), ("call_id", call_id), ("message", message)]
}

/// Placeholders for the reply templates: `call_ids` as a JSON array (decision 18).
pub fn reply_placeholders(call_ids: &[String]) -> Placeholders {
    let mut p = Placeholders::new();
    p.insert("call_ids", call_ids_json(call_ids));
    p
}

/// The reply templates' `call_ids` value: the ids as a JSON array.
pub fn call_ids_json(call_ids: &[String]) -> String {
    serde_json::to_string(call_ids).unwrap_or_else(|_| "[]".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_render_with_their_placeholders() {
        let t = Template::text(defaults::UPDATE);
        let out = t.render(&update_placeholders("book", "c1", "Looking up Tokyo")).unwrap();
        assert_eq!(
            out,
            "Progress from `book`: Looking up Tokyo\nThe tool is still working. Share only what this update says and do not guess the final result."
        );
        let ids = ["a_final".to_string(), "b_final".to_string()];
        let out =
            Template::text(defaults::REPLY_AT_TAIL).render(&reply_placeholders(&ids)).unwrap();
        assert!(out.starts_with(
            r#"Background tool calls have new results (call ids: ["a_final","b_final"])."#
        ));
    }

    #[test]
    fn unknown_placeholders_and_braces() {
        let p = update_placeholders("f", "c", "m");
        assert_eq!(
            Template::text("{nope}").render(&p).unwrap_err().to_string(),
            "cannot render template: unknown placeholder `{nope}`"
        );
        assert_eq!(Template::text("{{literal}} {message}").render(&p).unwrap(), "{literal} m");
        assert!(Template::text("oops }").render(&p).is_err());
        assert_eq!(Template::text("é{{ {message} ü}}{call_id}").render(&p).unwrap(), "é{ m ü}c");
        assert_eq!(
            Template::text("x {message").render(&p).unwrap_err().to_string(),
            "cannot render template: unclosed `{message`"
        );
    }

    #[test]
    fn the_most_specific_level_wins_whole() {
        let session = Templates {
            update: Some("S {message}".into()),
            reply_at_tail: Some("S tail".into()),
            ..Default::default()
        };
        let agent = Templates { update: Some("A {message}".into()), ..Default::default() };
        let r = Templates::resolve(&[Some(&agent), Some(&session)]);
        let p = update_placeholders("f", "c", "m");
        assert_eq!(r.update.render(&p).unwrap(), "A m");
        // The agent set templates, so its missing keys fall back to the defaults, not the session's.
        assert_eq!(
            r.reply_at_tail.render(&reply_placeholders(&[])).unwrap(),
            Template::text(defaults::REPLY_AT_TAIL).render(&reply_placeholders(&[])).unwrap()
        );
        let r = Templates::resolve(&[None, Some(&session)]);
        assert_eq!(r.update.render(&p).unwrap(), "S m");
    }
}
