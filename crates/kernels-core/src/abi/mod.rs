//! The kernel ABI: what a tier and the frame agree on, with no code that
//! computes a product. The kernel table and its families, the activation
//! and output structs, the tiles and their shapes, the activation layouts,
//! the weight's panel form, and a tier's declaration. Nothing here imports
//! from the layers above it (`reference/`, `frame/`, `scalar.rs`, `proof/`;
//! `tests/layers.rs` checks).

pub mod activations;
pub mod family;
pub mod pairing;
pub mod panel;
pub mod rows;
pub mod spec;
pub mod table;
pub mod tile;
