//! Keeping every request within the model's context (docs/providers.md#a-context-that-fits).
//!
//! A session's [`ContextWindow`] says how many tokens the model takes and which
//! [`ContextPolicy`] makes a request fit. The runtime asks it twice: before a request whose
//! estimate is over the window (only when the host set one), and once after a provider answered
//! that the request was too long ([`LlmError::ContextLength`]), with a budget taken from the
//! provider's own figures. The default policy, [`TrimOldest`], leaves out the oldest items
//! first — a step's message with its calls and their outputs together, never the agent's
//! instructions nor the newest user message — and then shortens the longest texts left. A host
//! replaces it (to summarise instead, say) with [`ContextWindow::policy`].
//!
//! Only the request is fitted: the session's history keeps every item.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use colloquy_model::{ChatContext, ChatItem, Role};

use crate::turns::step_of;
use crate::{LlmError, LlmRequest};

/// What a [`ContextPolicy`] returns: the request to send.
pub type Fitted<'a> = Pin<Box<dyn Future<Output = LlmRequest> + Send + 'a>>;

/// How a request is made to fit a token budget.
pub trait ContextPolicy: Send + Sync + 'static {
    /// The request's size in tokens, as this policy counts them (by default
    /// [`estimate_tokens`]: a byte count, cautious for English, code and JSON alike).
    fn estimate(&self, request: &LlmRequest) -> usize {
        estimate_tokens(request)
    }

    /// `request` made to fit `budget` tokens (as [`estimate`](Self::estimate) counts). The
    /// runtime sends what this returns; a request still over the budget is sent as it is.
    fn fit(&self, request: LlmRequest, budget: usize) -> Fitted<'_>;
}

/// The model's context size and the policy that keeps requests within it; a session option
/// (`SessionBuilder::max_context_tokens`, `SessionBuilder::context_policy`).
///
/// ```
/// use colloquy_llm::context::ContextWindow;
/// let window = ContextWindow::tokens(4096);
/// assert_eq!(window.max_tokens(), Some(4096));
/// assert_eq!(window.budget(), Some(3072)); // a quarter kept for the reply
/// assert_eq!(ContextWindow::default().budget(), None);
/// ```
#[derive(Clone)]
pub struct ContextWindow {
    max_tokens: Option<u32>,
    policy: Arc<dyn ContextPolicy>,
}

impl Default for ContextWindow {
    /// No size: requests go as they are until a provider says one is too long; then it is
    /// retried once, trimmed by [`TrimOldest`].
    fn default() -> Self {
        Self { max_tokens: None, policy: Arc::new(TrimOldest) }
    }
}

impl fmt::Debug for ContextWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ContextWindow")
            .field("max_tokens", &self.max_tokens)
            .finish_non_exhaustive()
    }
}

impl ContextWindow {
    /// A model that takes `max_tokens` tokens, its prompt and its reply together.
    pub fn tokens(max_tokens: u32) -> Self {
        Self { max_tokens: Some(max_tokens), ..Self::default() }
    }

    /// The same window, with `policy` making requests fit.
    pub fn policy(mut self, policy: impl ContextPolicy) -> Self {
        self.policy = Arc::new(policy);
        self
    }

    /// The same policy, for a model that takes `max_tokens` tokens.
    pub fn with_max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// The model's context size, if the host said.
    pub fn max_tokens(&self) -> Option<u32> {
        self.max_tokens
    }

    /// The tokens a request may take: the window less [`reply_reserve`] for the reply.
    pub fn budget(&self) -> Option<usize> {
        self.max_tokens.map(|max| prompt_budget(u64::from(max)))
    }

    /// `request`, fitted to [`budget`](Self::budget) if it is over it; as it is otherwise, or
    /// without a size.
    pub async fn fit(&self, request: LlmRequest) -> LlmRequest {
        let Some(budget) = self.budget() else { return request };
        if self.policy.estimate(&request) <= budget {
            return request;
        }
        self.policy.fit(request, budget).await
    }

    /// After a provider refused `sent` as too long (`error`, of kind `context_length`): the
    /// request to try once more, smaller than `sent` by the provider's figures (or half of it
    /// when it gave none); `None` when the policy could not make it smaller.
    pub async fn refit(&self, sent: &LlmRequest, error: &LlmError) -> Option<LlmRequest> {
        let estimated = self.policy.estimate(sent);
        let budget = overflow_budget(estimated, error, self.budget());
        let fitted = self.policy.fit(sent.clone(), budget).await;
        (self.policy.estimate(&fitted) < estimated).then_some(fitted)
    }
}

/// Tokens kept for the model's reply out of a window of `max`: a quarter, at most 4,096.
pub fn reply_reserve(max: u64) -> u64 {
    (max / 4).min(4096)
}

fn prompt_budget(max: u64) -> usize {
    usize::try_from(max - reply_reserve(max)).unwrap_or(usize::MAX)
}

/// The budget of a retry, in the policy's units: the provider's limit (less the reply's
/// reserve) scaled by how the policy's estimate compares with the prompt's real size when the
/// provider said both; else half the estimate; never over the host's own budget.
fn overflow_budget(estimated: usize, error: &LlmError, configured: Option<usize>) -> usize {
    let half = estimated / 2;
    let from_provider = match error {
        LlmError::ContextLength { limit: Some(limit), prompt, .. } => {
            let budget = prompt_budget(*limit) as f64;
            match prompt {
                Some(prompt) if *prompt > 0 => {
                    Some((budget * estimated as f64 / *prompt as f64) as usize)
                }
                _ => Some(budget as usize),
            }
        }
        _ => None,
    };
    let budget = from_provider.filter(|b| *b < estimated).unwrap_or(half);
    configured.map_or(budget, |c| budget.min(c))
}

/// A cautious token count for a text: one token per three bytes (English runs near four, code
/// and JSON near three), and at least one for a non-empty text.
pub fn estimate_text(text: &str) -> usize {
    text.len().div_ceil(3)
}

/// Tokens a message costs beyond its text (role, separators), as chat templates add them.
const PER_ITEM: usize = 4;

fn estimate_item(item: &ChatItem) -> usize {
    PER_ITEM
        + match item {
            ChatItem::Message(m) => estimate_text(&m.text),
            ChatItem::FunctionCall(c) => {
                estimate_text(&c.name) + estimate_text(&c.arguments) + estimate_text(&c.call_id)
            }
            ChatItem::FunctionCallOutput(o) => estimate_text(&o.output) + estimate_text(&o.call_id),
            _ => 0,
        }
}

/// What a request costs besides its items: instructions and the tools' schemas.
fn estimate_fixed(request: &LlmRequest) -> usize {
    let tools: usize = request
        .tools
        .iter()
        .map(|t| {
            estimate_text(&t.name)
                + estimate_text(&t.description)
                + estimate_text(&t.parameters.to_string())
        })
        .sum();
    estimate_text(&request.instructions)
        + request.extra_instructions.as_deref().map_or(0, estimate_text)
        + tools
}

/// [`estimate_text`] over everything a request sends: instructions, tools and every item.
pub fn estimate_tokens(request: &LlmRequest) -> usize {
    estimate_fixed(request) + request.items.iter().map(estimate_item).sum::<usize>()
}

/// The default policy: the oldest items out first, then the longest texts shortened.
///
/// Items leave in units that a provider needs together: an LLM step's message, its calls and
/// their outputs; a synthetic update or final pair; any other message alone. The newest unit and
/// the newest user message stay. If what stays is still over the budget, the longest message
/// texts and tool outputs are cut in the middle, keeping their start and end around a note of
/// what was cut (a call's arguments are never cut: they must stay valid JSON).
#[derive(Clone, Copy, Debug, Default)]
pub struct TrimOldest;

impl ContextPolicy for TrimOldest {
    fn fit(&self, request: LlmRequest, budget: usize) -> Fitted<'_> {
        Box::pin(std::future::ready(trim_oldest(request, budget)))
    }
}

/// Shortest a text is cut to, in bytes.
const MIN_KEPT: usize = 240;

fn trim_oldest(request: LlmRequest, budget: usize) -> LlmRequest {
    let fixed = estimate_fixed(&request);
    let items = request.items.items();
    let units = units(items);
    let cost: Vec<usize> = items.iter().map(|item| estimate_item(item)).collect();
    let mut total = fixed + cost.iter().sum::<usize>();
    if total <= budget {
        return request;
    }
    let newest_user =
        items.iter().rposition(|i| i.as_message().is_some_and(|m| m.role == Role::User));
    let keep_units = [units.last().copied(), newest_user.map(|at| units[at])];
    let unit_count = units.iter().max().map_or(0, |u| u + 1);
    let mut unit_cost = vec![0; unit_count];
    for (unit, cost) in units.iter().zip(&cost) {
        unit_cost[*unit] += cost;
    }
    let mut dropped = vec![false; unit_count];
    for (unit, dropped) in dropped.iter_mut().enumerate() {
        if total <= budget {
            break;
        }
        if !keep_units.contains(&Some(unit)) {
            *dropped = true;
            total -= unit_cost[unit];
        }
    }
    let mut kept: Vec<Arc<ChatItem>> = items
        .iter()
        .zip(&units)
        .filter(|(_, u)| !dropped[**u])
        .map(|(i, _)| Arc::clone(i))
        .collect();
    while total > budget {
        let Some((at, len)) = longest_text(&kept) else { break };
        let excess_bytes = (total - budget) * 3;
        let target = len.saturating_sub(excess_bytes).max(MIN_KEPT);
        let before = estimate_item(&kept[at]);
        kept[at] = Arc::new(shortened(&kept[at], target));
        total = total - before + estimate_item(&kept[at]);
    }
    LlmRequest { items: Arc::new(ChatContext::from_shared(kept)), ..request }
}

/// Each item's unit, numbered in order of first appearance (see [`TrimOldest`]).
fn units(items: &[Arc<ChatItem>]) -> Vec<usize> {
    let mut by_step: HashMap<&str, usize> = HashMap::new();
    let mut by_call: HashMap<&str, usize> = HashMap::new();
    let mut next = 0;
    let mut fresh = || {
        next += 1;
        next - 1
    };
    items
        .iter()
        .map(|item| match &**item {
            ChatItem::Message(m) if m.role == Role::Assistant => match step_of(&m.id) {
                Some(step) => *by_step.entry(step).or_insert_with(&mut fresh),
                None => fresh(),
            },
            ChatItem::FunctionCall(c) => {
                let unit = match step_of(&c.id) {
                    Some(step) => *by_step.entry(step).or_insert_with(&mut fresh),
                    None => fresh(),
                };
                by_call.entry(&c.call_id).or_insert(unit);
                unit
            }
            ChatItem::FunctionCallOutput(o) => match by_call.get(o.call_id.as_str()) {
                Some(unit) => *unit,
                None => fresh(),
            },
            _ => fresh(),
        })
        .collect()
}

/// The item with the longest text that can still be cut, and that length in bytes.
fn longest_text(items: &[Arc<ChatItem>]) -> Option<(usize, usize)> {
    items
        .iter()
        .enumerate()
        .filter_map(|(at, item)| {
            let len = match &**item {
                ChatItem::Message(m) => m.text.len(),
                ChatItem::FunctionCallOutput(o) => o.output.len(),
                _ => 0,
            };
            (len > MIN_KEPT + CUT_NOTE_ROOM).then_some((at, len))
        })
        .max_by_key(|(_, len)| *len)
}

/// Room the cut note takes, so a cut always shortens.
const CUT_NOTE_ROOM: usize = 64;

fn shortened(item: &ChatItem, target: usize) -> ChatItem {
    let mut item = item.clone();
    match &mut item {
        ChatItem::Message(m) => m.text = cut_middle(&m.text, target),
        ChatItem::FunctionCallOutput(o) => o.output = cut_middle(&o.output, target),
        _ => {}
    }
    item
}

/// `text` cut to about `target` bytes: its start and end around a note of what was cut.
fn cut_middle(text: &str, target: usize) -> String {
    let keep = target.saturating_sub(CUT_NOTE_ROOM).max(2);
    let head_end = floor_char_boundary(text, keep / 2);
    let tail_start = ceil_char_boundary(text, text.len() - keep / 2);
    if head_end >= tail_start {
        return text.to_string();
    }
    let cut = text[head_end..tail_start].chars().count();
    format!(
        "{}\n[… {cut} characters cut to fit the model's context …]\n{}",
        &text[..head_end],
        &text[tail_start..]
    )
}

fn floor_char_boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn ceil_char_boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at += 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RequestKind;
    use crate::fixtures::{call, msg, output};

    fn request(items: Vec<ChatItem>) -> LlmRequest {
        LlmRequest {
            kind: RequestKind::UserTurn,
            agent: "a".into(),
            speech_id: "s".into(),
            instructions: Arc::from("Be brief."),
            extra_instructions: None,
            items: Arc::new(ChatContext::from_items(items)),
            tools: Arc::from(Vec::new()),
            tool_choice: None,
        }
    }

    fn ids(request: &LlmRequest) -> Vec<String> {
        request.items.iter().map(|i| i.id().to_string()).collect()
    }

    fn long(n: usize) -> String {
        "word ".repeat(n)
    }

    fn conversation() -> Vec<ChatItem> {
        vec![
            msg("u1", Role::User, &long(100)),
            msg("s1", Role::Assistant, &long(100)),
            call("s1/fnc_0", "c1"),
            msg("u2", Role::User, &long(100)),
            output("c1", &long(100)),
            msg("s2", Role::Assistant, &long(100)),
            msg("u3", Role::User, "and now?"),
        ]
    }

    #[test]
    fn a_request_within_its_budget_is_sent_as_it_is() {
        let sent = request(conversation());
        let budget = estimate_tokens(&sent);
        assert_eq!(ids(&trim_oldest(sent.clone(), budget)), ids(&sent));
    }

    #[test]
    fn the_oldest_units_leave_first_a_call_with_its_output() {
        let sent = request(conversation());
        let full = estimate_tokens(&sent);
        // Room for all but about one long text: u1 goes alone.
        let fitted = trim_oldest(sent.clone(), full - 100);
        assert_eq!(ids(&fitted), ["s1", "s1/fnc_0", "u2", "out_c1", "s2", "u3"]);
        // Less room: the step leaves with its call and the call's output, though the output
        // stood after u2.
        let fitted = trim_oldest(sent, full - 300);
        assert_eq!(ids(&fitted), ["u2", "s2", "u3"]);
        assert!(estimate_tokens(&fitted) <= full - 300);
    }

    #[test]
    fn the_newest_user_message_stays_and_is_cut_in_the_middle() {
        let huge = format!("START {} END", long(3000));
        let sent = request(vec![
            msg("u1", Role::User, "hello"),
            msg("s1", Role::Assistant, "hi"),
            msg("u2", Role::User, &huge),
        ]);
        let fitted = trim_oldest(sent, 500);
        assert_eq!(ids(&fitted), ["u2"]);
        let text = &fitted.items.items()[0].as_message().unwrap().text;
        assert!(text.starts_with("START ") && text.ends_with(" END"), "{text}");
        assert!(text.contains("characters cut to fit the model's context"));
        assert!(estimate_tokens(&fitted) <= 500, "{}", estimate_tokens(&fitted));
    }

    #[test]
    fn instructions_are_never_trimmed_and_a_tiny_budget_still_ends() {
        let sent = request(conversation());
        let fitted = trim_oldest(sent, 1);
        assert_eq!(&*fitted.instructions, "Be brief.");
        assert_eq!(ids(&fitted), ["u3"]);
    }

    #[test]
    fn a_retry_budget_follows_the_providers_figures() {
        let e = |limit, prompt| LlmError::ContextLength {
            status: 400,
            body: String::new(),
            limit,
            prompt,
        };
        // 4,096 tokens less a quarter for the reply, in units where the prompt of 8,000 real
        // tokens was estimated at 10,000.
        assert_eq!(overflow_budget(10_000, &e(Some(4096), Some(8000)), None), 3840);
        assert_eq!(overflow_budget(10_000, &e(Some(4096), None), None), 3072);
        assert_eq!(overflow_budget(10_000, &e(None, None), None), 5000);
        assert_eq!(overflow_budget(10_000, &e(None, None), Some(1000)), 1000);
        // A limit above the estimate says nothing usable: half.
        assert_eq!(overflow_budget(1000, &e(Some(100_000), None), None), 500);
    }

    #[tokio::test]
    async fn a_refit_that_cannot_shrink_says_so() {
        let window = ContextWindow::default();
        let error =
            LlmError::ContextLength { status: 400, body: String::new(), limit: None, prompt: None };
        let small = request(vec![msg("u1", Role::User, "hi")]);
        assert!(window.refit(&small, &error).await.is_none());
        let big = request(conversation());
        let smaller = window.refit(&big, &error).await.expect("smaller");
        assert!(estimate_tokens(&smaller) <= estimate_tokens(&big) / 2);
    }
}
