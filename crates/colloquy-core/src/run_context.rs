//! What a running tool sees of its call and its session (TOOL-SEMANTICS §2).

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::chat::FunctionCall;

/// The context handed to every tool body: the call it answers, the speech that dispatched it,
/// the agent, and the session's user data. Cheap to clone.
///
/// ```
/// use colloquy_core::{FunctionCall, RunContext, Timestamp};
/// let call = FunctionCall { id: "g/fnc_0".into(), call_id: "c1".into(), name: "t".into(),
///     arguments: "{}".into(), extra: Default::default(), created_at: Timestamp::default() };
/// let ctx = RunContext::new(call, "s1", "travel", Some(std::sync::Arc::new(7u32)));
/// assert_eq!(ctx.call_id(), "c1");
/// assert_eq!(ctx.userdata::<u32>(), Some(&7));
/// ```
#[derive(Clone)]
pub struct RunContext {
    inner: Arc<Inner>,
}

struct Inner {
    function_call: FunctionCall,
    speech_id: String,
    agent_id: String,
    userdata: Option<Arc<dyn Any + Send + Sync>>,
}

impl RunContext {
    /// A context for one call. The runtime builds these; tests and standalone runs may too.
    pub fn new(
        function_call: FunctionCall,
        speech_id: impl Into<String>,
        agent_id: impl Into<String>,
        userdata: Option<Arc<dyn Any + Send + Sync>>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                function_call,
                speech_id: speech_id.into(),
                agent_id: agent_id.into(),
                userdata,
            }),
        }
    }

    /// The function-call item (with canonical arguments).
    pub fn function_call(&self) -> &FunctionCall {
        &self.inner.function_call
    }

    /// The call id the model gave.
    pub fn call_id(&self) -> &str {
        &self.inner.function_call.call_id
    }

    /// The id of the speech that dispatched this call (`s1`, `s2`, …).
    pub fn speech_id(&self) -> &str {
        &self.inner.speech_id
    }

    /// The id of the agent whose turn dispatched this call.
    pub fn agent_id(&self) -> &str {
        &self.inner.agent_id
    }

    /// The session's user data, if it is of type `T` (see `SessionBuilder::userdata`). Use a
    /// `Mutex` or atomics inside `T` for state tools change.
    pub fn userdata<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.inner.userdata.as_deref()?.downcast_ref::<T>()
    }
}

impl fmt::Debug for RunContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunContext")
            .field("call_id", &self.call_id())
            .field("name", &self.inner.function_call.name)
            .field("speech_id", &self.inner.speech_id)
            .field("agent_id", &self.inner.agent_id)
            .finish_non_exhaustive()
    }
}
