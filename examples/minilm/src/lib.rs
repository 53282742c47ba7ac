//! The repository README's examples (a model runtime on the facade, a
//! converter on the recipe crate alone) compile and run as doctests here: the
//! README is not inside any published crate.
#![forbid(unsafe_code)]

#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctest;
