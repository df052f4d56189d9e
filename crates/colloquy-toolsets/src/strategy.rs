//! Search strategies (§19.3–19.5): the [`SearchStrategy`] protocol, BM25 (the
//! default) and keyword scoring.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;

use regex::Regex;

use crate::item::SearchItem;

/// A boxed future, for strategies that work asynchronously.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How a tool search finds tools. Three steps, each synchronous or asynchronous:
/// [`build_index`](Self::build_index) once at setup (again on reload),
/// [`search`](Self::search) per query, [`cleanup`](Self::cleanup) at close.
///
/// Synchronous strategies implement [`SyncSearchStrategy`] instead and get this trait for free.
/// The toolset does not truncate what a custom strategy returns.
pub trait SearchStrategy: Send + Sync {
    /// Indexes `items` (the strategy keeps its own index).
    fn build_index<'a>(&'a mut self, items: &'a [SearchItem]) -> BoxFuture<'a, ()>;
    /// Indices into `items` of the best matches for `query`, best first.
    fn search<'a>(
        &'a self,
        query: &'a str,
        items: &'a [SearchItem],
        max_results: usize,
    ) -> BoxFuture<'a, Vec<usize>>;
    /// Forgets the index.
    fn cleanup(&mut self) -> BoxFuture<'_, ()>;
}

/// A strategy that answers at once.
pub trait SyncSearchStrategy: Send + Sync {
    /// Indexes `items`.
    fn build_index(&mut self, items: &[SearchItem]);
    /// Indices of the best matches, best first.
    fn search(&self, query: &str, items: &[SearchItem], max_results: usize) -> Vec<usize>;
    /// Forgets the index.
    fn cleanup(&mut self) {}
}

impl<S: SyncSearchStrategy> SearchStrategy for S {
    fn build_index<'a>(&'a mut self, items: &'a [SearchItem]) -> BoxFuture<'a, ()> {
        SyncSearchStrategy::build_index(self, items);
        Box::pin(std::future::ready(()))
    }

    fn search<'a>(
        &'a self,
        query: &'a str,
        items: &'a [SearchItem],
        max_results: usize,
    ) -> BoxFuture<'a, Vec<usize>> {
        Box::pin(std::future::ready(SyncSearchStrategy::search(self, query, items, max_results)))
    }

    fn cleanup(&mut self) -> BoxFuture<'_, ()> {
        SyncSearchStrategy::cleanup(self);
        Box::pin(std::future::ready(()))
    }
}

/// Lowercase, `_` as a space, split on whitespace (names, parameter names, queries).
fn name_tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| c == '_' || c.is_whitespace())
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
}

/// Lowercase, split on whitespace; punctuation and underscores stay (`city.` ≠ `city`).
fn text_tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split_whitespace().map(str::to_lowercase)
}

/// Keeps the indices with a positive score, best first, ties in index order, at most `max`.
fn ranked(scores: impl Iterator<Item = (usize, f64)>, max: usize) -> Vec<usize> {
    let mut hits: Vec<(usize, f64)> = scores.filter(|(_, s)| *s > 0.0).collect();
    hits.sort_by(|a, b| b.1.total_cmp(&a.1)); // stable: ties keep index order
    hits.into_iter().take(max).map(|(i, _)| i).collect()
}

/// Okapi BM25 over name (×3), description (×2) and parameters (×1), §19.4.
///
/// ```
/// use colloquy_toolsets::{Bm25Strategy, SearchItem, SyncSearchStrategy};
/// let item = |name: &str, description: &str| SearchItem {
///     name: name.into(), description: description.into(), parameters: vec![], source: 0,
/// };
/// let items = [item("get_weather", "Get current weather"), item("get_stock", "Stock price")];
/// let mut bm25 = Bm25Strategy::default();
/// bm25.build_index(&items);
/// assert_eq!(bm25.search("weather", &items, 5), [0]);
/// ```
#[derive(Clone, Debug)]
pub struct Bm25Strategy {
    k1: f64,
    b: f64,
    /// Each document's length, in index order.
    lengths: Vec<usize>,
    /// Term → its idf and the documents containing it with the term's frequency there (an
    /// inverted index: a search touches only the documents that contain a query term).
    postings: HashMap<String, (f64, Vec<(u32, u32)>)>,
    avgdl: f64,
}

impl Default for Bm25Strategy {
    fn default() -> Self {
        Self::new(1.5, 0.75)
    }
}

impl Bm25Strategy {
    /// BM25 with the given saturation `k1` and length normalisation `b` (defaults 1.5, 0.75).
    pub fn new(k1: f64, b: f64) -> Self {
        Self { k1, b, lengths: Vec::new(), postings: HashMap::new(), avgdl: 0.0 }
    }

    fn document(item: &SearchItem) -> Vec<String> {
        let name: Vec<String> = name_tokens(&item.name).collect();
        let description: Vec<String> = text_tokens(&item.description).collect();
        let mut tokens = Vec::with_capacity(name.len() * 3 + description.len() * 2);
        for _ in 0..3 {
            tokens.extend(name.iter().cloned());
        }
        for _ in 0..2 {
            tokens.extend(description.iter().cloned());
        }
        for (key, text) in &item.parameters {
            tokens.extend(name_tokens(key));
            tokens.extend(text_tokens(text));
        }
        tokens
    }

    /// Every item's score for `query`, in index order (0 where nothing matches).
    pub fn scores(&self, query: &str) -> Vec<f64> {
        let mut scores = vec![0.0; self.lengths.len()];
        for term in name_tokens(query) {
            let Some((idf, docs)) = self.postings.get(&term) else { continue };
            for &(doc, tf) in docs {
                let tf = f64::from(tf);
                let norm = if self.avgdl > 0.0 {
                    1.0 - self.b + self.b * self.lengths[doc as usize] as f64 / self.avgdl
                } else {
                    1.0
                };
                scores[doc as usize] += idf * tf * (self.k1 + 1.0) / (tf + self.k1 * norm);
            }
        }
        scores
    }

    /// The inverse document frequency of a (lowercase) term, if indexed.
    pub fn idf(&self, term: &str) -> Option<f64> {
        self.postings.get(term).map(|(idf, _)| *idf)
    }

    /// The mean document length.
    pub fn avgdl(&self) -> f64 {
        self.avgdl
    }

    /// Each item's document length, in index order.
    pub fn lengths(&self) -> Vec<usize> {
        self.lengths.clone()
    }
}

impl SyncSearchStrategy for Bm25Strategy {
    fn build_index(&mut self, items: &[SearchItem]) {
        self.lengths.clear();
        let mut postings: HashMap<String, (f64, Vec<(u32, u32)>)> = HashMap::new();
        for (doc, item) in items.iter().enumerate() {
            let tokens = Self::document(item);
            self.lengths.push(tokens.len());
            let mut tf: HashMap<String, u32> = HashMap::new();
            for token in tokens {
                *tf.entry(token).or_insert(0) += 1;
            }
            for (term, count) in tf {
                postings.entry(term).or_default().1.push((doc as u32, count));
            }
        }
        let n = self.lengths.len() as f64;
        self.avgdl = if self.lengths.is_empty() {
            0.0
        } else {
            self.lengths.iter().sum::<usize>() as f64 / n
        };
        for (idf, docs) in postings.values_mut() {
            let df = docs.len() as f64;
            *idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
            // Summed in document order, so scores do not depend on hash order.
            docs.sort_unstable();
        }
        self.postings = postings;
    }

    fn search(&self, query: &str, _items: &[SearchItem], max_results: usize) -> Vec<usize> {
        ranked(self.scores(query).into_iter().enumerate(), max_results)
    }

    fn cleanup(&mut self) {
        self.lengths.clear();
        self.postings.clear();
        self.avgdl = 0.0;
    }
}

/// Keyword scoring, §19.5: each query word (a regular expression, or a literal when it is not
/// a valid one) scores 3 for a match in the name, 2 in the description, 1 in the parameters.
#[derive(Clone, Debug, Default)]
pub struct KeywordStrategy {
    /// Per item: lowercase name, description, and "name description …" of its parameters.
    index: Vec<[String; 3]>,
}

impl KeywordStrategy {
    fn fields(item: &SearchItem) -> [String; 3] {
        let params: Vec<&str> =
            item.parameters.iter().flat_map(|(k, v)| [k.as_str(), v.as_str()]).collect();
        [item.name.to_lowercase(), item.description.to_lowercase(), params.join(" ").to_lowercase()]
    }

    /// Every item's score for `query`, in index order.
    pub fn scores(&self, query: &str, items: &[SearchItem]) -> Vec<f64> {
        let mut keywords: Vec<String> = Vec::new();
        for word in query.to_lowercase().split_whitespace() {
            if !keywords.iter().any(|k| k == word) {
                keywords.push(word.to_string());
            }
        }
        let patterns: Vec<Pattern> = keywords.iter().map(|k| Pattern::new(k)).collect();
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                // Items indexed after `build_index` are indexed here, lazily.
                let lazy;
                let fields = match self.index.get(i) {
                    Some(fields) => fields,
                    None => {
                        lazy = Self::fields(item);
                        &lazy
                    }
                };
                patterns
                    .iter()
                    .map(|p| {
                        let weight = |field: &str, w: f64| if p.is_match(field) { w } else { 0.0 };
                        weight(&fields[0], 3.0) + weight(&fields[1], 2.0) + weight(&fields[2], 1.0)
                    })
                    .sum()
            })
            .collect()
    }
}

/// A keyword: plain words (the usual case) are found with a substring search; anything with
/// regular-expression syntax is compiled, and a pattern that does not compile is a literal.
enum Pattern {
    Literal(String),
    Regex(Regex),
}

impl Pattern {
    fn new(keyword: &str) -> Self {
        if regex::escape(keyword) == keyword {
            return Pattern::Literal(keyword.to_string());
        }
        match Regex::new(keyword) {
            Ok(re) => Pattern::Regex(re),
            Err(_) => Pattern::Literal(keyword.to_string()),
        }
    }

    fn is_match(&self, text: &str) -> bool {
        match self {
            Pattern::Literal(word) => text.contains(word.as_str()),
            Pattern::Regex(re) => re.is_match(text),
        }
    }
}

impl SyncSearchStrategy for KeywordStrategy {
    fn build_index(&mut self, items: &[SearchItem]) {
        self.index = items.iter().map(Self::fields).collect();
    }

    fn search(&self, query: &str, items: &[SearchItem], max_results: usize) -> Vec<usize> {
        ranked(self.scores(query, items).into_iter().enumerate(), max_results)
    }

    fn cleanup(&mut self) {
        self.index.clear();
    }
}
