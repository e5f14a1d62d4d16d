//! Derive macros of `rill-events` (see that crate, and docs/EVENTS.md §1):
//!
//! * `#[derive(EventKey)]` with `#[event_key(topic = "orders")]`: the fields, in order,
//!   are the key's stable bytes.
//! * `#[derive(Event)]` with `#[event(name = "order-placed" | tag = N, algebra = A,
//!   ordering = O, codec = json | msgpack, ordering_with = method)]` and `#[event(key)]`
//!   on the key field: the struct is its own body.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as Tokens};
use quote::{format_ident, quote};
use syn::{Data, DeriveInput, Fields, Ident, LitInt, LitStr, parse_macro_input};

/// The path of the `rill_events` crate as the deriving crate sees it: `rill_events` if
/// it depends on it, else the `rill` facade's `rill::events`.
fn krate() -> Tokens {
    use proc_macro_crate::{FoundCrate, crate_name};
    match crate_name("rill-events") {
        Ok(FoundCrate::Name(name)) => {
            let name = Ident::new(&name, Span::call_site());
            quote!(::#name)
        }
        Ok(FoundCrate::Itself) => quote!(::rill_events),
        Err(_) => match crate_name("rill") {
            Ok(FoundCrate::Name(name)) => {
                let name = Ident::new(&name, Span::call_site());
                quote!(::#name::events)
            }
            _ => quote!(::rill_events),
        },
    }
}

/// `#[derive(EventKey)]`: see the crate docs.
#[proc_macro_derive(EventKey, attributes(event_key))]
pub fn derive_event_key(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    event_key(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

fn event_key(input: &DeriveInput) -> syn::Result<Tokens> {
    let mut topic: Option<LitStr> = None;
    for attr in input
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("event_key"))
    {
        attr.parse_nested_meta(|m| {
            if m.path.is_ident("topic") {
                topic = Some(m.value()?.parse()?);
                Ok(())
            } else {
                Err(m.error("expected `topic = \"...\"`"))
            }
        })?;
    }
    let Some(topic) = topic else {
        return Err(syn::Error::new_spanned(
            &input.ident,
            "an event key names its topic: #[event_key(topic = \"...\")]",
        ));
    };
    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new_spanned(
            &input.ident,
            "#[derive(EventKey)] is for structs",
        ));
    };
    let n = data.fields.len();
    if n == 0 {
        return Err(syn::Error::new_spanned(
            &input.ident,
            "an event key has at least one field (its bytes are never empty)",
        ));
    }
    let krate = krate();
    let name = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let members: Vec<Tokens> = match &data.fields {
        Fields::Named(f) => f
            .named
            .iter()
            .map(|f| {
                let id = f.ident.as_ref().expect("named");
                quote!(#id)
            })
            .collect(),
        Fields::Unnamed(_) => (0..n)
            .map(|i| {
                let i = syn::Index::from(i);
                quote!(#i)
            })
            .collect(),
        Fields::Unit => unreachable!("n > 0"),
    };
    let puts = members.iter().enumerate().map(|(i, m)| {
        let last = i + 1 == n;
        quote!(#krate::KeyPart::put(&self.#m, out, #last);)
    });
    let vars: Vec<Ident> = (0..n).map(|i| format_ident!("field_{i}")).collect();
    let takes = vars.iter().enumerate().map(|(i, v)| {
        let last = i + 1 == n;
        quote!(let #v = #krate::KeyPart::take(&mut input, #last)?;)
    });
    let build = match &data.fields {
        Fields::Named(_) => quote!(Self { #(#members: #vars),* }),
        _ => quote!(Self(#(#vars),*)),
    };
    Ok(quote! {
        impl #impl_generics #krate::EventKey for #name #ty_generics #where_clause {
            const TOPIC: &'static str = #topic;
            fn encode_into(&self, out: &mut ::std::vec::Vec<u8>) {
                #(#puts)*
            }
            fn decode(bytes: &[u8]) -> ::core::result::Result<Self, #krate::KeyError> {
                let mut input = bytes;
                #(#takes)*
                #krate::finish_key(input)?;
                ::core::result::Result::Ok(#build)
            }
        }
    })
}

/// `#[derive(Event)]`: see the crate docs.
#[proc_macro_derive(Event, attributes(event))]
pub fn derive_event(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    event(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// The tag of an event type's stable name: the low 32 bits of `xxh3_64(name)`.
fn tag_of(name: &str) -> u32 {
    xxhash_rust::xxh3::xxh3_64(name.as_bytes()) as u32
}

fn event(input: &DeriveInput) -> syn::Result<Tokens> {
    let mut name: Option<LitStr> = None;
    let mut tag: Option<LitInt> = None;
    let mut algebra: Option<Ident> = None;
    let mut ordering: Option<Ident> = None;
    let mut codec: Option<Ident> = None;
    let mut ordering_with: Option<Ident> = None;
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("event")) {
        attr.parse_nested_meta(|m| {
            if m.path.is_ident("name") {
                name = Some(m.value()?.parse()?);
            } else if m.path.is_ident("tag") {
                tag = Some(m.value()?.parse()?);
            } else if m.path.is_ident("algebra") {
                algebra = Some(m.value()?.parse()?);
            } else if m.path.is_ident("ordering") {
                ordering = Some(m.value()?.parse()?);
            } else if m.path.is_ident("codec") {
                codec = Some(m.value()?.parse()?);
            } else if m.path.is_ident("ordering_with") {
                ordering_with = Some(m.value()?.parse()?);
            } else {
                return Err(m.error(
                    "expected one of `name`, `tag`, `algebra`, `ordering`, `codec`, `ordering_with`",
                ));
            }
            Ok(())
        })?;
    }
    let ident = &input.ident;
    if name.is_some() && tag.is_some() {
        return Err(syn::Error::new_spanned(
            ident,
            "an event takes `name` or `tag`, not both",
        ));
    }
    let tag: Tokens = match (&name, &tag) {
        (_, Some(t)) => {
            let v: u32 = t.base10_parse()?;
            quote!(#v)
        }
        (Some(n), None) => {
            let v = tag_of(&n.value());
            quote!(#v)
        }
        (None, None) => {
            let v = tag_of(&ident.to_string());
            quote!(#v)
        }
    };
    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new_spanned(
            ident,
            "#[derive(Event)] is for structs",
        ));
    };
    let mut key: Option<(Tokens, &syn::Type)> = None;
    for (i, f) in data.fields.iter().enumerate() {
        let mut is_key = false;
        for attr in f.attrs.iter().filter(|a| a.path().is_ident("event")) {
            attr.parse_nested_meta(|m| {
                if m.path.is_ident("key") {
                    is_key = true;
                    Ok(())
                } else {
                    Err(m.error("expected `key`"))
                }
            })?;
        }
        if is_key {
            if key.is_some() {
                return Err(syn::Error::new_spanned(f, "only one field is the key"));
            }
            let member = match &f.ident {
                Some(id) => quote!(#id),
                None => {
                    let i = syn::Index::from(i);
                    quote!(#i)
                }
            };
            key = Some((member, &f.ty));
        }
    }
    let Some((key_member, key_ty)) = key else {
        return Err(syn::Error::new_spanned(
            ident,
            "mark the key field with #[event(key)]",
        ));
    };
    let krate = krate();
    let algebra = algebra.unwrap_or_else(|| Ident::new("NonAssociative", Span::call_site()));
    let ordering = match ordering {
        Some(o) => {
            let valid = ["Relaxed", "Acquire", "Release", "AcqRel"];
            if !valid.contains(&o.to_string().as_str()) {
                return Err(syn::Error::new_spanned(
                    &o,
                    "ordering is Relaxed, Acquire, Release or AcqRel",
                ));
            }
            quote!(#krate::Ordering::#o)
        }
        None => quote!(#krate::Ordering::Relaxed),
    };
    let codec = match codec.as_ref().map(Ident::to_string).as_deref() {
        None | Some("json") => quote!(#krate::BodyCodec::Json),
        Some("msgpack") => quote!(#krate::BodyCodec::MsgPack),
        Some(_) => {
            return Err(syn::Error::new_spanned(
                codec,
                "codec is `json` or `msgpack`",
            ));
        }
    };
    let ordering_fn = ordering_with.map(|m| {
        quote! {
            fn ordering(&self) -> #krate::Ordering {
                self.#m()
            }
        }
    });
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    Ok(quote! {
        impl #impl_generics #krate::Event for #ident #ty_generics #where_clause {
            type Key = #key_ty;
            type Body = Self;
            type Algebra = #krate::#algebra;
            const TAG: u32 = #tag;
            const ORDERING: #krate::Ordering = #ordering;
            const CODEC: #krate::BodyCodec = #codec;
            fn key(&self) -> Self::Key {
                ::core::clone::Clone::clone(&self.#key_member)
            }
            fn body(&self) -> &Self {
                self
            }
            #ordering_fn
        }
    })
}
