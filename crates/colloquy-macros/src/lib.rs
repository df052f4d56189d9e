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
//! deriving `Deserialize` and `JsonSchema`): `Option<T>` parameters are not required, and
//! `#[default = <value>]` on a parameter gives the value a missing argument takes. It returns
//! `Result<T, E>`: `E` is any error (`ToolError`, or any `std::error::Error`, which the model
//! reads as an internal error), `T` any output colloquy takes (`String`, `()`, `Json`,
//! `StopResponse`, `Handoff`…) or, for any other type, a `Serialize` value sent as compact
//! JSON (which one it is, the macro reads from the type's name).
//! Attributes: `name = "…"`, `description = "…"`, `cancellable`, `ignore_on_enter`,
//! `on_duplicate = "allow" | "reject" | "replace" | "confirm"`, `duplicate_scope = "name" |
//! "name_and_args" | ["arg", …]` (a list: calls are duplicates when those arguments are equal
//! after validation, whatever the others hold; each must be a parameter of the function),
//! `deadline = "30s"`, `heartbeat = "10s"`, `retry(attempts = 3, backoff = "200ms")` (safe to
//! retry; also `factor = 2`, `max_backoff = "5s"`, `attempt_timeout = "2s"`),
//! `requires_approval` (every call waits for `SessionHandle::approve`; a predicate over the
//! arguments: `.requires_approval_if(…)` on the returned tool), `max_concurrent = 4` (at most
//! that many calls at once, later ones queued), `idempotent = "10m"` (a result that ended
//! `done` answers the same call again for that long without running), `on_interrupted =
//! "fail" | "rerun" | "ask"` (what a resumed session does with a call its process left
//! running).

mod docs;
mod options;

use proc_macro::TokenStream;
use proc_macro2::Span;
use quote::{format_ident, quote};
use syn::{FnArg, ItemFn, Pat, Type, parse_macro_input};

/// Turns an async function into a function returning its `colloquy::tools::FunctionTool`.
#[proc_macro_attribute]
pub fn function_tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    let options = parse_macro_input!(attr as options::Options);
    let function = parse_macro_input!(item as ItemFn);
    match expand_fn(options, function) {
        Ok(tokens) => tokens.into(),
        Err(error) => error.to_compile_error().into(),
    }
}

/// On an `impl` block: its `&self` methods marked `#[function_tool(…)]` stay methods, and
/// `Type::tools(self: Arc<Self>) -> Vec<FunctionTool>` makes one tool of each, sharing the
/// value (a database pool, a client) across every call — LiveKit's tools as methods of an
/// agent class.
#[proc_macro_attribute]
pub fn function_tools(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        let error = syn::Error::new(Span::call_site(), "#[function_tools] takes no options");
        return error.to_compile_error().into();
    }
    let block = parse_macro_input!(item as syn::ItemImpl);
    match expand_impl(block) {
        Ok(tokens) => tokens.into(),
        Err(error) => error.to_compile_error().into(),
    }
}

/// One parameter of the tool's schema.
struct Param {
    name: syn::Ident,
    ty: Type,
    doc: Option<String>,
    /// `#[default = <expr>]` on the parameter: the value when the model leaves it out.
    default: Option<syn::Expr>,
}

/// What a tool function says about its tool.
struct Tool {
    name: String,
    description: String,
    params: Vec<Param>,
    /// The arguments of the body's call, in order (`ctx` or `args.<name>`).
    call_args: Vec<proc_macro2::TokenStream>,
    flags: Vec<proc_macro2::TokenStream>,
    args_ident: syn::Ident,
    /// The function's `Ok` type is no output type colloquy knows: serialize it (`Json`).
    serialize: bool,
}

impl Tool {
    /// Reads a signature; `receiver` says whether a `&self` comes first (a method).
    fn read(
        options: &options::Options,
        attrs: &[syn::Attribute],
        sig: &syn::Signature,
        receiver: bool,
    ) -> syn::Result<Tool> {
        if sig.asyncness.is_none() {
            return Err(syn::Error::new_spanned(
                sig.fn_token,
                "#[function_tool] needs an `async fn`: the tool's body runs as a future",
            ));
        }
        let docs = docs::Docs::of(attrs);
        let (mut params, mut call_args, mut context_seen) = (Vec::new(), Vec::new(), false);
        for input in &sig.inputs {
            let typed = match input {
                FnArg::Typed(typed) => typed,
                FnArg::Receiver(r)
                    if receiver && r.reference.is_some() && r.mutability.is_none() =>
                {
                    continue;
                }
                FnArg::Receiver(r) if receiver => {
                    return Err(syn::Error::new_spanned(
                        r,
                        "a tool method takes `&self`: its value is shared by every call",
                    ));
                }
                FnArg::Receiver(r) => {
                    return Err(syn::Error::new_spanned(
                        r,
                        "#[function_tool] on a method needs its `impl` block marked #[function_tools]",
                    ));
                }
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
            let default = default_of(&typed.attrs)?;
            params.push(Param { name, ty: (*typed.ty).clone(), doc, default });
        }
        // The schema's property names: serde and schemars drop a raw identifier's `r#`.
        let names: Vec<String> =
            params.iter().map(|p| syn::ext::IdentExt::unraw(&p.name).to_string()).collect();
        options.check_scope(&names)?;
        let fn_name = sig.ident.to_string();
        Ok(Tool {
            name: options.name.clone().unwrap_or_else(|| fn_name.clone()),
            description: options.description.clone().unwrap_or_else(|| docs.summary()),
            params,
            call_args,
            flags: options.builder_calls(),
            args_ident: format_ident!("__{}Args", to_camel(&fn_name)),
            serialize: ok_type(&sig.output).is_some_and(|ty| !is_output_type(ty)),
        })
    }

    /// The argument struct: one field per parameter, deriving what typed tools need.
    fn args_struct(&self) -> proc_macro2::TokenStream {
        let mut default_fns = Vec::new();
        let fields = self.params.iter().map(|p| {
            let (name, ty) = (&p.name, &p.ty);
            let doc = p.doc.iter();
            let default = match &p.default {
                Some(value) => {
                    // serde takes a default as a function's path; schemars shows its value.
                    let fn_ident = format_ident!("__default_{}", name);
                    let path = fn_ident.to_string();
                    default_fns.push(quote! { fn #fn_ident() -> #ty { #value } });
                    Some(quote!(#[serde(default = #path)]))
                }
                None => is_option(ty).then(|| quote!(#[serde(default)])),
            };
            quote! { #(#[doc = #doc])* #default #name: #ty, }
        });
        let fields: Vec<_> = fields.collect();
        let args_ident = &self.args_ident;
        quote! {
            #(#default_fns)*
            #[derive(::colloquy::__private::serde::Deserialize, ::colloquy::__private::schemars::JsonSchema)]
            #[serde(crate = "::colloquy::__private::serde")]
            #[schemars(crate = "::colloquy::__private::schemars")]
            #[allow(non_camel_case_types)]
            struct #args_ident { #(#fields)* }
        }
    }

    /// The body's result as a tool answers: its error converted into a `ToolError` (any
    /// error type does), its value serialized when it is no output type colloquy knows.
    fn finish(&self, result: proc_macro2::TokenStream) -> proc_macro2::TokenStream {
        let value = match self.serialize {
            true => quote!(::colloquy::tools::Json(value)),
            false => quote!(value),
        };
        quote! {
            match #result {
                ::std::result::Result::Ok(value) => ::std::result::Result::Ok(#value),
                ::std::result::Result::Err(error) => ::std::result::Result::Err(
                    ::std::convert::Into::<::colloquy::tools::ToolError>::into(error),
                ),
            }
        }
    }

    /// `FunctionTool::new(…)` with the options applied, calling `body` with the arguments.
    fn constructor(&self, closure: proc_macro2::TokenStream) -> proc_macro2::TokenStream {
        let (name, description, flags) = (&self.name, &self.description, &self.flags);
        quote! { ::colloquy::tools::FunctionTool::new(#name, #description, #closure) #(#flags)* }
    }
}

fn expand_fn(options: options::Options, function: ItemFn) -> syn::Result<proc_macro2::TokenStream> {
    let tool = Tool::read(&options, &function.attrs, &function.sig, false)?;
    let vis = &function.vis;
    let fn_name = &function.sig.ident;
    let args_struct = tool.args_struct();
    let args_ident = &tool.args_ident;
    let call_args = &tool.call_args;
    let mut body_fn = function.clone();
    body_fn.sig.ident = syn::Ident::new("__body", Span::call_site());
    body_fn.vis = syn::Visibility::Inherited;
    body_fn.attrs.retain(|a| !a.path().is_ident("doc"));
    strip_param_defaults(&mut body_fn.sig);
    let result = tool.finish(quote!(__body(#(#call_args),*).await));
    let constructor = tool.constructor(quote! {
        |ctx: ::colloquy::tools::RunContext, args: #args_ident| async move {
            let _ = &ctx;
            #result
        }
    });
    let outer_attrs = function.attrs.iter().filter(|a| a.path().is_ident("doc"));
    Ok(quote! {
        #(#outer_attrs)*
        #vis fn #fn_name() -> ::colloquy::tools::FunctionTool {
            #args_struct
            #body_fn
            #constructor
        }
    })
}

fn expand_impl(mut block: syn::ItemImpl) -> syn::Result<proc_macro2::TokenStream> {
    let mut tools = Vec::new();
    for item in &mut block.items {
        let syn::ImplItem::Fn(method) = item else { continue };
        let Some(at) = method.attrs.iter().position(|a| a.path().is_ident("function_tool")) else {
            continue;
        };
        let attr = method.attrs.remove(at);
        let options = match &attr.meta {
            syn::Meta::Path(_) => options::Options::default(),
            _ => attr.parse_args::<options::Options>()?,
        };
        let tool = Tool::read(&options, &method.attrs, &method.sig, true)?;
        strip_param_defaults(&mut method.sig);
        let method_name = &method.sig.ident;
        let args_struct = tool.args_struct();
        let args_ident = &tool.args_ident;
        let call_args = &tool.call_args;
        let result = tool.finish(quote!(this.#method_name(#(#call_args),*).await));
        let constructor = tool.constructor(quote! {
            move |ctx: ::colloquy::tools::RunContext, args: #args_ident| {
                let this = ::std::sync::Arc::clone(&this);
                async move {
                    let _ = &ctx;
                    #result
                }
            }
        });
        tools.push(quote! {{
            #args_struct
            let this = ::std::sync::Arc::clone(&self);
            #constructor
        }});
    }
    let self_ty = &block.self_ty;
    let (impl_generics, _, where_clause) = block.generics.split_for_impl();
    Ok(quote! {
        #block
        impl #impl_generics #self_ty #where_clause {
            /// The tools of this value's `#[function_tool]` methods, each sharing it.
            pub fn tools(self: ::std::sync::Arc<Self>) -> ::std::vec::Vec<::colloquy::tools::FunctionTool> {
                ::std::vec![#(#tools),*]
            }
        }
    })
}

/// The value of a parameter's `#[default = <expr>]`, if it has one.
fn default_of(attrs: &[syn::Attribute]) -> syn::Result<Option<syn::Expr>> {
    for attr in attrs {
        if !attr.path().is_ident("default") {
            continue;
        }
        return match &attr.meta {
            syn::Meta::NameValue(nv) => Ok(Some(nv.value.clone())),
            _ => Err(syn::Error::new_spanned(attr, "write a default as `#[default = <value>]`")),
        };
    }
    Ok(None)
}

/// Removes the `#[default = …]` attributes, which a function's parameters may not carry.
fn strip_param_defaults(sig: &mut syn::Signature) {
    for input in &mut sig.inputs {
        if let FnArg::Typed(typed) = input {
            typed.attrs.retain(|a| !a.path().is_ident("default"));
        }
    }
}

/// `T` of a `-> Result<T, E>` signature.
fn ok_type(output: &syn::ReturnType) -> Option<&Type> {
    let syn::ReturnType::Type(_, ty) = output else { return None };
    let Type::Path(path) = &**ty else { return None };
    let last = path.path.segments.last().filter(|s| s.ident == "Result")?;
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else { return None };
    match args.args.first()? {
        syn::GenericArgument::Type(ty) => Some(ty),
        _ => None,
    }
}

/// Whether colloquy takes `ty` as an output as it is (`IntoToolOutput`); any other type is
/// serialized. Read from the type's name, as a macro must.
fn is_output_type(ty: &Type) -> bool {
    const OUTPUTS: [&str; 23] = [
        "String",
        "str",
        "ToolOutput",
        "ToolResult",
        "StopResponse",
        "Handoff",
        "Value",
        "Json",
        "Option",
        "bool",
        "i8",
        "i16",
        "i32",
        "i64",
        "isize",
        "u8",
        "u16",
        "u32",
        "u64",
        "usize",
        "f32",
        "f64",
        "Cow",
    ];
    match ty {
        Type::Tuple(tuple) => tuple.elems.is_empty(),
        Type::Reference(reference) => is_output_type(&reference.elem),
        Type::Path(path) => path
            .path
            .segments
            .last()
            .is_some_and(|s| OUTPUTS.contains(&s.ident.to_string().as_str())),
        _ => false,
    }
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
