//! The attribute's options: `#[function_tool(name = "…", cancellable, on_duplicate = "…",
//! duplicate_scope = "…" | ["arg", …], deadline = "30s", heartbeat = "10s",
//! retry(attempts = 3, backoff = "200ms", factor = 2, max_backoff = "5s", attempt_timeout = "2s"),
//! requires_approval, max_concurrent = 4, idempotent = "10m", on_interrupted = "rerun")]`.

use quote::quote;
use syn::parse::{Parse, ParseStream};
use syn::{Ident, LitStr, Token};

/// `duplicate_scope`: a named scope, or the arguments an `args` scope compares.
enum Scope {
    Named(String),
    Args(Vec<LitStr>),
}

#[derive(Default)]
pub(crate) struct Options {
    pub name: Option<String>,
    pub description: Option<String>,
    cancellable: bool,
    ignore_on_enter: bool,
    requires_approval: bool,
    on_duplicate: Option<(String, proc_macro2::Span)>,
    duplicate_scope: Option<Scope>,
    /// Milliseconds.
    deadline: Option<u64>,
    /// Milliseconds.
    heartbeat: Option<u64>,
    max_concurrent: Option<usize>,
    /// Milliseconds.
    idempotent: Option<u64>,
    note_remembered: bool,
    retry: Option<Retry>,
    /// `fail`, `rerun` or `ask`.
    on_interrupted: Option<String>,
}

/// `retry(…)`: attempts and backoff are required; durations in milliseconds.
struct Retry {
    attempts: u32,
    backoff: u64,
    factor: Option<u32>,
    max_backoff: Option<u64>,
    attempt_timeout: Option<u64>,
}

impl Retry {
    /// Parses the parenthesised list after `retry`.
    fn parse(key: &Ident, input: ParseStream) -> syn::Result<Self> {
        let content;
        syn::parenthesized!(content in input);
        let (mut attempts, mut backoff, mut factor, mut max_backoff, mut attempt_timeout) =
            (None, None, None, None, None);
        while !content.is_empty() {
            let name: Ident = content.parse()?;
            content.parse::<Token![=]>()?;
            match name.to_string().as_str() {
                "attempts" => attempts = Some(content.parse::<syn::LitInt>()?.base10_parse()?),
                "factor" => factor = Some(content.parse::<syn::LitInt>()?.base10_parse()?),
                "backoff" => backoff = Some(millis(&content.parse()?)?),
                "max_backoff" => max_backoff = Some(millis(&content.parse()?)?),
                "attempt_timeout" => attempt_timeout = Some(millis(&content.parse()?)?),
                other => {
                    return Err(syn::Error::new(
                        name.span(),
                        format!(
                            "unknown retry option `{other}` (expected attempts, backoff, factor, \
                             max_backoff or attempt_timeout)"
                        ),
                    ));
                }
            }
            if !content.is_empty() {
                content.parse::<Token![,]>()?;
            }
        }
        match (attempts, backoff) {
            (Some(attempts), Some(backoff)) if attempts >= 1 => {
                Ok(Retry { attempts, backoff, factor, max_backoff, attempt_timeout })
            }
            _ => Err(syn::Error::new(
                key.span(),
                "retry needs attempts (at least 1) and backoff: retry(attempts = 3, backoff = \"200ms\")",
            )),
        }
    }
}

/// A duration as people write it (`"30s"`, `"500ms"`, `"2m"`), in milliseconds, at least 1.
fn millis(v: &LitStr) -> syn::Result<u64> {
    let duration = humantime::parse_duration(&v.value()).map_err(|e| {
        syn::Error::new(v.span(), format!("expected a duration such as \"30s\" or \"500ms\": {e}"))
    })?;
    match u64::try_from(duration.as_millis()) {
        Ok(0) => Err(syn::Error::new(v.span(), "the duration must be at least 1 ms")),
        Ok(ms) => Ok(ms),
        Err(_) => Err(syn::Error::new(v.span(), "the duration is too long")),
    }
}

impl Parse for Options {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut options = Options::default();
        while !input.is_empty() {
            let key: Ident = input.parse()?;
            let value = |input: ParseStream| -> syn::Result<LitStr> {
                input.parse::<Token![=]>()?;
                input.parse()
            };
            match key.to_string().as_str() {
                "cancellable" => options.cancellable = true,
                "ignore_on_enter" => options.ignore_on_enter = true,
                "requires_approval" => options.requires_approval = true,
                "name" => options.name = Some(value(input)?.value()),
                "description" => options.description = Some(value(input)?.value()),
                "on_duplicate" => {
                    let v = value(input)?;
                    let allowed = ["allow", "reject", "replace", "confirm"];
                    if !allowed.contains(&v.value().as_str()) {
                        return Err(syn::Error::new(
                            v.span(),
                            "expected allow, reject, replace or confirm",
                        ));
                    }
                    options.on_duplicate = Some((v.value(), v.span()));
                }
                "duplicate_scope" if input.peek2(syn::token::Bracket) => {
                    input.parse::<Token![=]>()?;
                    let content;
                    let brackets = syn::bracketed!(content in input);
                    let names = content.parse_terminated(<LitStr as Parse>::parse, Token![,])?;
                    if names.is_empty() {
                        return Err(syn::Error::new(
                            brackets.span.join(),
                            "name at least one argument (or use \"name\")",
                        ));
                    }
                    options.duplicate_scope = Some(Scope::Args(names.into_iter().collect()));
                }
                "duplicate_scope" => {
                    let v = value(input)?;
                    if !["name", "name_and_args"].contains(&v.value().as_str()) {
                        return Err(syn::Error::new(
                            v.span(),
                            "expected \"name\", \"name_and_args\" or a list of argument names \
                             such as [\"order_id\"]",
                        ));
                    }
                    options.duplicate_scope = Some(Scope::Named(v.value()));
                }
                "deadline" => options.deadline = Some(millis(&value(input)?)?),
                "heartbeat" => options.heartbeat = Some(millis(&value(input)?)?),
                "retry" => options.retry = Some(Retry::parse(&key, input)?),
                "idempotent" => options.idempotent = Some(millis(&value(input)?)?),
                "note_remembered" => options.note_remembered = true,
                "on_interrupted" => {
                    let v = value(input)?;
                    if !["fail", "rerun", "ask"].contains(&v.value().as_str()) {
                        return Err(syn::Error::new(v.span(), "expected fail, rerun or ask"));
                    }
                    options.on_interrupted = Some(v.value());
                }
                "max_concurrent" => {
                    input.parse::<Token![=]>()?;
                    let n: syn::LitInt = input.parse()?;
                    match n.base10_parse::<usize>()? {
                        0 => return Err(syn::Error::new(n.span(), "at least 1 call must run")),
                        n => options.max_concurrent = Some(n),
                    }
                }
                other => {
                    return Err(syn::Error::new(
                        key.span(),
                        format!(
                            "unknown option `{other}` (expected name, description, cancellable, \
                             ignore_on_enter, on_duplicate, duplicate_scope, deadline, \
                             heartbeat, retry, requires_approval, max_concurrent, \
                             idempotent, note_remembered or on_interrupted)"
                        ),
                    ));
                }
            }
            if !input.is_empty() {
                input.parse::<Token![,]>()?;
            }
        }
        Ok(options)
    }
}

impl Options {
    /// Refuses an `args` duplicate scope naming something that is not one of `params` (the
    /// tool's argument names), pointing at the name.
    pub(crate) fn check_scope(&self, params: &[String]) -> syn::Result<()> {
        let Some(Scope::Args(names)) = &self.duplicate_scope else {
            return Ok(());
        };
        match names.iter().find(|n| !params.contains(&n.value())) {
            Some(name) => Err(syn::Error::new(
                name.span(),
                format!(
                    "duplicate_scope: `{}` is not a parameter of this tool (its parameters: {})",
                    name.value(),
                    if params.is_empty() { "it has none".to_string() } else { params.join(", ") }
                ),
            )),
            None => Ok(()),
        }
    }

    /// The builder calls the options stand for, each `.method(…)`.
    pub(crate) fn builder_calls(&self) -> Vec<proc_macro2::TokenStream> {
        let mut calls = Vec::new();
        if self.cancellable {
            calls.push(quote!(.cancellable()));
        }
        if self.ignore_on_enter {
            calls.push(quote!(.ignore_on_enter()));
        }
        if self.requires_approval {
            calls.push(quote!(.requires_approval()));
        }
        if let Some(ms) = self.deadline {
            calls.push(quote!(.deadline(::std::time::Duration::from_millis(#ms))));
        }
        if let Some(ms) = self.heartbeat {
            calls.push(quote!(.heartbeat(::std::time::Duration::from_millis(#ms))));
        }
        if let Some(r) = &self.retry {
            let (attempts, backoff) = (r.attempts, r.backoff);
            let mut policy = quote!(::colloquy::tools::RetryPolicy::new(
                #attempts,
                ::std::time::Duration::from_millis(#backoff)
            ));
            if let Some(factor) = r.factor {
                policy = quote!(#policy.factor(#factor));
            }
            if let Some(ms) = r.max_backoff {
                policy = quote!(#policy.max_backoff(::std::time::Duration::from_millis(#ms)));
            }
            if let Some(ms) = r.attempt_timeout {
                policy = quote!(#policy.attempt_timeout(::std::time::Duration::from_millis(#ms)));
            }
            calls.push(quote!(.retry(#policy)));
        }
        if let Some(n) = self.max_concurrent {
            calls.push(quote!(.max_concurrent(#n)));
        }
        if self.note_remembered {
            calls.push(quote!(.note_remembered()));
        }
        if let Some(ms) = self.idempotent {
            calls.push(quote!(.idempotent(::std::time::Duration::from_millis(#ms))));
        }
        if let Some(policy) = &self.on_interrupted {
            let policy = match policy.as_str() {
                "rerun" => quote!(Rerun),
                "ask" => quote!(Ask),
                _ => quote!(Fail),
            };
            calls.push(quote!(.on_interrupted(::colloquy::tools::OnInterrupted::#policy)));
        }
        if self.on_duplicate.is_some() || self.duplicate_scope.is_some() {
            let policy = match self.on_duplicate.as_ref().map(|(v, _)| v.as_str()) {
                Some("reject") => quote!(Reject),
                Some("replace") => quote!(Replace),
                Some("confirm") => quote!(Confirm),
                _ => quote!(Allow),
            };
            let scope = match &self.duplicate_scope {
                Some(Scope::Named(v)) if v == "name_and_args" => {
                    quote!(::colloquy::tools::DuplicateScope::NameAndArgs)
                }
                Some(Scope::Args(names)) => {
                    quote!(::colloquy::tools::DuplicateScope::args([#(#names),*]))
                }
                _ => quote!(::colloquy::tools::DuplicateScope::Name),
            };
            calls.push(quote!(.on_duplicate(::colloquy::tools::OnDuplicate::#policy, #scope)));
        }
        calls
    }
}
