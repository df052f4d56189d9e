//! The toolsets users reach for (§18–§20): tool search over a large catalogue
//! with BM25, keyword or custom strategies, the prompt-cache-friendly tool proxy, and the
//! end-call tool. The search code here is pure; the runtime only sees ordinary tools and a
//! toolset whose visible tools change as the model loads them
//! ([`colloquy_model::ToolVisibility`]).

mod item;
mod proxy;
mod search;
mod strategy;

pub use item::{SearchEntry, SearchItem, items};
pub use proxy::{CALL_TOOL, CALL_TOOL_DESCRIPTION, PROXY_SEARCH_DESCRIPTION, ToolProxyToolset};
pub use search::{
    QUERY_DESCRIPTION, SEARCH_DESCRIPTION, SEARCH_TOOL, ToolSearch, ToolSearchToolset,
};
pub use strategy::{Bm25Strategy, BoxFuture, KeywordStrategy, SearchStrategy, SyncSearchStrategy};
