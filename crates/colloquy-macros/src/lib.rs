//! `#[function_tool]`: a colloquy tool from a plain async function. The tool's name is the
//! function's, its description the doc comment's text, and each parameter (except a
//! `RunContext`, in any position or absent) a property of its JSON schema, described by the
//! doc comment's parameter list:
//!
//! ```text
//! /// Book a flight between two airports.
//! ///
//! /// * `origin` - IATA code of the departure airport.
//! /// * `passengers` - How many people travel.
//! #[function_tool(cancellable)]
//! async fn book_flight(ctx: RunContext, origin: String, passengers: Option<u8>)
//!     -> Result<String, ToolError> { … }
//!
//! let agent = Agent::new("travel", "…").tool(book_flight());
//! ```
//!
//! The function becomes one that returns the `FunctionTool`; the body runs unchanged. Its
//! arguments go through the same path as every typed tool's (an argument struct is generated,
//! deriving `Deserialize` and `JsonSchema`): `Option<T>` parameters are not required.
//! Attributes: `name = "…"`, `description = "…"`, `cancellable`, `ignore_on_enter`,
//! `on_duplicate = "allow" | "reject" | "replace" | "confirm"`, `duplicate_scope = "name" |
//! "name_and_args"`.

mod docs;
mod options;

use proc_macro::TokenStream;
use proc_macro2::Span;
use quote::{format_ident, quote};
use syn::{FnArg, ItemFn, Pat, Type, parse_macro_input};

/// Turns an async function into a function returning its `colloquy::FunctionTool`.
#[proc_macro_attribute]
pub fn function_tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    let options = parse_macro_input!(attr as options::Options);
    let function = parse_macro_input!(item as ItemFn);
    match expand(options, function) {
        Ok(tokens) => tokens.into(),
        Err(error) => error.to_compile_error().into(),
    }
}

/// One parameter of the tool's schema.
struct Param {
    name: syn::Ident,
    ty: Type,
    doc: Option<String>,
}

fn expand(options: options::Options, function: ItemFn) -> syn::Result<proc_macro2::TokenStream> {
    let sig = &function.sig;
    if sig.asyncness.is_none() {
        return Err(syn::Error::new_spanned(
            sig.fn_token,
            "#[function_tool] needs an `async fn`: the tool's body runs as a future",
        ));
    }
    let docs = docs::Docs::of(&function.attrs);
    let mut params = Vec::new();
    let mut call_args = Vec::new();
    let mut context_seen = false;
    for input in &sig.inputs {
        let FnArg::Typed(typed) = input else {
            return Err(syn::Error::new_spanned(
                input,
                "#[function_tool] on a method needs the `impl` block marked #[function_tools]",
            ));
        };
        if is_run_context(&typed.ty) {
            if context_seen {
                return Err(syn::Error::new_spanned(typed, "only one `RunContext` parameter"));
            }
            context_seen = true;
            call_args.push(quote!(ctx));
            continue;
        }
        let Pat::Ident(ident) = &*typed.pat else {
            return Err(syn::Error::new_spanned(
                &typed.pat,
                "a tool parameter needs a plain name: it becomes the argument's name",
            ));
        };
        let name = ident.ident.clone();
        call_args.push(quote!(args.#name));
        let doc = docs.param(&name.to_string());
        params.push(Param { name, ty: (*typed.ty).clone(), doc });
    }

    let vis = &function.vis;
    let fn_name = &sig.ident;
    let tool_name = options.name.clone().unwrap_or_else(|| fn_name.to_string());
    let description = options.description.clone().unwrap_or_else(|| docs.summary());
    let args_ident = format_ident!("__{}Args", to_camel(&fn_name.to_string()));
    let fields = params.iter().map(|p| {
        let (name, ty) = (&p.name, &p.ty);
        let doc = p.doc.iter();
        let default = is_option(ty).then(|| quote!(#[serde(default)]));
        quote! { #(#[doc = #doc])* #default #name: #ty, }
    });
    let mut body_fn = function.clone();
    body_fn.sig.ident = syn::Ident::new("__body", Span::call_site());
    body_fn.vis = syn::Visibility::Inherited;
    body_fn.attrs.retain(|a| !a.path().is_ident("doc"));
    let flags = options.builder_calls();
    let outer_attrs = function.attrs.iter().filter(|a| a.path().is_ident("doc"));
    Ok(quote! {
        #(#outer_attrs)*
        #vis fn #fn_name() -> ::colloquy::FunctionTool {
            #[derive(::colloquy::__private::serde::Deserialize, ::colloquy::__private::schemars::JsonSchema)]
            #[serde(crate = "::colloquy::__private::serde")]
            #[schemars(crate = "::colloquy::__private::schemars")]
            #[allow(non_camel_case_types)]
            struct #args_ident { #(#fields)* }
            #body_fn
            let tool = ::colloquy::FunctionTool::new(
                #tool_name,
                #description,
                |ctx: ::colloquy::RunContext, args: #args_ident| {
                    let _ = &ctx;
                    __body(#(#call_args),*)
                },
            );
            tool #(#flags)*
        }
    })
}

/// `RunContext` (or a path ending in it).
fn is_run_context(ty: &Type) -> bool {
    matches!(ty, Type::Path(p) if p.path.segments.last().is_some_and(|s| s.ident == "RunContext"))
}

/// `Option<…>` (or a path ending in it).
fn is_option(ty: &Type) -> bool {
    matches!(ty, Type::Path(p) if p.path.segments.last().is_some_and(|s| s.ident == "Option"))
}

fn to_camel(name: &str) -> String {
    name.split('_')
        .filter(|part| !part.is_empty())
        .map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|c| c.to_ascii_uppercase())
                .into_iter()
                .chain(chars)
                .collect::<String>()
        })
        .collect()
}
