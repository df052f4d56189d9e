//! Duplicate detection (§6.1, §1.3, decisions 11 and 18): keys, the confirm
//! parameter, and the running-call listing the duplicate templates show.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::args::ArgumentError;

/// What to do when the tool is called while an equal call is still running (§6.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnDuplicate {
    /// Run both.
    #[default]
    Allow,
    /// Answer the new call with the reject text.
    Reject,
    /// Cancel the running call, then run the new one.
    Replace,
    /// Ask the model to confirm with `lk_agents_confirm_duplicate`.
    Confirm,
}

/// What makes two calls duplicates (§6.1).
///
/// `Name` and `NameAndArgs` are the reference's scopes; [`args`](Self::args) is colloquy's:
/// "one refund per `order_id` at a time, whatever the amount".
///
/// ```
/// use colloquy_model::DuplicateScope;
/// let scope = DuplicateScope::args(["order_id"]);
/// assert_eq!(scope.arg_names(), Some(&["order_id".to_string()][..]));
/// assert_eq!(DuplicateScope::Name.arg_names(), None);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DuplicateScope {
    /// Same tool name.
    #[default]
    Name,
    /// Same tool name and the same validated arguments.
    NameAndArgs,
    /// Same tool name and equal validated values of these arguments (sorted, each once; an
    /// argument the call leaves out, with no default, is absent on both sides and matches).
    /// Build it with [`DuplicateScope::args`].
    Args(Arc<[String]>),
}

impl DuplicateScope {
    /// Calls are duplicates when these arguments are equal after validation (so `"25"` and
    /// `25` agree where the schema coerces), whatever the others hold. Every name must be one
    /// of the tool's parameters: a session refuses an agent whose tool names another
    /// ([`FunctionTool::check_duplicate_scope`](crate::FunctionTool::check_duplicate_scope)).
    /// No names at all keys on the name alone, as [`Name`](Self::Name) does.
    pub fn args<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let names: BTreeSet<String> = names.into_iter().map(Into::into).collect();
        DuplicateScope::Args(names.into_iter().collect())
    }

    /// The arguments an [`args`](Self::args) scope compares, sorted; `None` for other scopes.
    pub fn arg_names(&self) -> Option<&[String]> {
        match self {
            DuplicateScope::Args(names) => Some(names),
            _ => None,
        }
    }
}

/// The part of the validated arguments an [`DuplicateScope::Args`] key compares: the named
/// arguments present, keys sorted at every depth.
pub(crate) fn chosen_args_json(arguments: &Value, names: &[String]) -> String {
    let chosen: Map<String, Value> = names
        .iter()
        .filter_map(|name| Some((name.clone(), arguments.get(name)?.clone())))
        .collect();
    sorted_json(&Value::Object(chosen))
}

/// The parameter a `confirm` tool gets (decision 14 keeps the reference's name).
pub const CONFIRM_PARAM: &str = "lk_agents_confirm_duplicate";

/// Its description in the tool's schema.
pub const CONFIRM_DESCRIPTION: &str = "Set to true to confirm running this tool again while an identical call is still running. Only set it when the user confirms the duplicate is needed.";

/// JSON with keys sorted at every depth, lists in order (the `name_and_args` key text).
pub fn sorted_json(value: &Value) -> String {
    fn sort(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                Value::Object(keys.into_iter().map(|k| (k.clone(), sort(&map[k]))).collect())
            }
            Value::Array(items) => Value::Array(items.iter().map(sort).collect()),
            other => other.clone(),
        }
    }
    sort(value).to_string()
}

/// Takes the confirm parameter out of the arguments (decision 11): only JSON `true` confirms;
/// `false`, `null` or absence do not; any other type is an argument error.
pub fn take_confirmation(
    tool_name: &str,
    arguments: &mut Map<String, Value>,
) -> Result<bool, ArgumentError> {
    match arguments.remove(CONFIRM_PARAM) {
        None | Some(Value::Null | Value::Bool(false)) => Ok(false),
        Some(Value::Bool(true)) => Ok(true),
        Some(_) => Err(ArgumentError::new(tool_name, format!("{CONFIRM_PARAM}: expected boolean"))),
    }
}

/// Adds the confirm parameter to a tool schema (an optional boolean, default `false`).
pub fn with_confirm_param(mut schema: Value) -> Value {
    if let Some(map) = schema.as_object_mut() {
        let properties = map.entry("properties").or_insert_with(|| Value::Object(Map::new()));
        if let Some(properties) = properties.as_object_mut() {
            properties.insert(
                CONFIRM_PARAM.into(),
                json!({"type": ["boolean", "null"], "default": false, "description": CONFIRM_DESCRIPTION}),
            );
        }
    }
    schema
}

/// One running call as the duplicate templates and `lk_agents_get_running_tasks` show it
/// (decision 18): `{"call_id", "name", "arguments"}`.
pub fn running_call_json(call_id: &str, name: &str, arguments: &str) -> Value {
    json!({"call_id": call_id, "name": name, "arguments": arguments})
}

/// A running call with the new call's duplicate key, as [`decide`] needs to know it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunningDuplicate<'a> {
    /// Its call id.
    pub call_id: &'a str,
    /// Whether it can be cancelled (a `replace` needs that).
    pub cancellable: bool,
}

/// What a new call does about the running calls with its key (§6.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No duplicate, `allow`, or a confirmed `confirm`: run it.
    Run,
    /// `replace`: cancel these calls, then run it.
    Replace(Vec<String>),
    /// `reject`: answer with the duplicate-reject text; the call is not run.
    Reject,
    /// `confirm`, not confirmed: answer with the duplicate-confirm text; not run.
    AskToConfirm,
    /// `replace` of a call that cannot be cancelled: answer with this error; not run.
    CannotReplace(String),
}

/// The duplicate policy's decision, as a pure function of the tool's policy, whether the call
/// confirmed, and the running duplicates (found by [`FunctionTool::duplicate_key`](crate::FunctionTool::duplicate_key)).
///
/// ```
/// use colloquy_model::duplicate::{RunningDuplicate, Verdict, decide};
/// use colloquy_model::OnDuplicate;
/// let running = [RunningDuplicate { call_id: "c1", cancellable: true }];
/// assert_eq!(decide("book", OnDuplicate::Replace, false, &running), Verdict::Replace(vec!["c1".into()]));
/// assert_eq!(decide("book", OnDuplicate::Reject, false, &[]), Verdict::Run);
/// ```
pub fn decide(
    tool: &str,
    policy: OnDuplicate,
    confirmed: bool,
    running: &[RunningDuplicate],
) -> Verdict {
    if running.is_empty() {
        return Verdict::Run;
    }
    match policy {
        OnDuplicate::Allow => Verdict::Run,
        OnDuplicate::Reject => Verdict::Reject,
        OnDuplicate::Confirm if confirmed => Verdict::Run,
        OnDuplicate::Confirm => Verdict::AskToConfirm,
        OnDuplicate::Replace if running.iter().any(|r| !r.cancellable) => {
            Verdict::CannotReplace(format!(
                "cannot replace duplicate call of `{tool}`: running call is not cancellable (allow_cancellation=False)"
            ))
        }
        OnDuplicate::Replace => {
            Verdict::Replace(running.iter().map(|r| r.call_id.to_string()).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RunContext;
    use crate::{FunctionTool, ToolError};

    fn tool(policy: OnDuplicate, scope: DuplicateScope) -> FunctionTool {
        let schema = json!({"type": "object", "properties": {"order_id": {"type": "string"},
            "note": {"type": ["string", "null"], "default": null}}, "required": ["order_id"]});
        FunctionTool::from_schema("check_order", "", schema, |_c: RunContext, _a| async {
            Ok::<_, ToolError>("x")
        })
        .unwrap()
        .on_duplicate(policy, scope)
    }

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn keys_follow_policy_and_scope() {
        let a = args(json!({"order_id": "5"}));
        assert_eq!(tool(OnDuplicate::Allow, DuplicateScope::Name).duplicate_key(&a), None);
        assert_eq!(
            tool(OnDuplicate::Reject, DuplicateScope::Name).duplicate_key(&a).as_deref(),
            Some("check_order")
        );
        let by_args = tool(OnDuplicate::Reject, DuplicateScope::NameAndArgs);
        let k1 = by_args.duplicate_key(&args(json!({"order_id": "5"})));
        let k2 = by_args.duplicate_key(&args(json!({"note": null, "order_id": "5", "x": 1})));
        assert_eq!(k1, k2, "validated, defaults filled, extra keys dropped, keys sorted");
        assert_ne!(k1, by_args.duplicate_key(&args(json!({"order_id": "7"}))));
    }

    #[test]
    fn an_args_scope_keys_on_its_validated_arguments_only() {
        let schema = json!({"type": "object", "properties": {"order_id": {"type": "integer"},
            "amount": {"type": "number"}, "region": {"type": "string", "default": "eu"}},
            "required": ["order_id", "amount"]});
        let refund = FunctionTool::from_schema("refund", "", schema, |_c: RunContext, _a| async {
            Ok::<_, ToolError>("x")
        })
        .unwrap()
        .on_duplicate(OnDuplicate::Reject, DuplicateScope::args(["region", "order_id"]));
        let key = |v: Value| refund.duplicate_key(&args(v));
        let first = key(json!({"order_id": 5, "amount": 10}));
        assert_eq!(first, key(json!({"order_id": "5", "amount": 99})), "coerced, amount ignored");
        assert_eq!(first, key(json!({"order_id": 5, "amount": 1, "region": "eu"})), "default");
        assert_ne!(first, key(json!({"order_id": 6, "amount": 10})));
        assert_ne!(first, key(json!({"order_id": 5, "amount": 10, "region": "us"})));
        assert_eq!(refund.check_duplicate_scope(), Ok(()));
        assert_eq!(
            DuplicateScope::args(["b", "a", "b"]),
            DuplicateScope::args(["a", "b"]),
            "sorted, each once"
        );
        let typo = refund.on_duplicate(OnDuplicate::Reject, DuplicateScope::args(["orderid"]));
        assert_eq!(
            typo.check_duplicate_scope().unwrap_err().to_string(),
            "the duplicate scope of `refund` names `orderid`, which is not one of its parameters"
        );
        let flag = tool(OnDuplicate::Confirm, DuplicateScope::args([CONFIRM_PARAM]));
        assert!(flag.check_duplicate_scope().is_err(), "the confirm flag is never compared");
    }

    #[test]
    fn only_json_true_confirms() {
        let mut a = args(json!({"order_id": "5", CONFIRM_PARAM: true}));
        assert_eq!(take_confirmation("t", &mut a), Ok(true));
        assert!(!a.contains_key(CONFIRM_PARAM));
        for v in [json!(false), json!(null)] {
            let mut a = args(json!({CONFIRM_PARAM: v}));
            assert_eq!(take_confirmation("t", &mut a), Ok(false));
        }
        let mut a = args(json!({CONFIRM_PARAM: "false"}));
        assert_eq!(
            take_confirmation("t", &mut a).unwrap_err().to_string(),
            "Error parsing arguments for `t`: lk_agents_confirm_duplicate: expected boolean"
        );
    }

    #[test]
    fn sorted_json_sorts_at_every_depth() {
        assert_eq!(
            sorted_json(&json!({"b": {"d": 1, "c": [2, 1]}, "a": 0})),
            r#"{"a":0,"b":{"c":[2,1],"d":1}}"#
        );
    }

    #[test]
    fn the_policy_decides_what_a_duplicate_does() {
        let running = [
            RunningDuplicate { call_id: "c1", cancellable: true },
            RunningDuplicate { call_id: "c2", cancellable: true },
        ];
        let stuck = [RunningDuplicate { call_id: "c1", cancellable: false }];
        assert_eq!(decide("t", OnDuplicate::Allow, false, &running), Verdict::Run);
        assert_eq!(decide("t", OnDuplicate::Reject, false, &running), Verdict::Reject);
        assert_eq!(decide("t", OnDuplicate::Confirm, false, &running), Verdict::AskToConfirm);
        assert_eq!(decide("t", OnDuplicate::Confirm, true, &running), Verdict::Run);
        assert_eq!(
            decide("t", OnDuplicate::Replace, false, &running),
            Verdict::Replace(vec!["c1".into(), "c2".into()])
        );
        let Verdict::CannotReplace(text) = decide("t", OnDuplicate::Replace, false, &stuck) else {
            panic!("a call that cannot be cancelled cannot be replaced");
        };
        assert!(text.starts_with("cannot replace duplicate call of `t`"));
        for policy in [OnDuplicate::Reject, OnDuplicate::Confirm, OnDuplicate::Replace] {
            assert_eq!(decide("t", policy, false, &[]), Verdict::Run, "no duplicate: run");
        }
    }
}
