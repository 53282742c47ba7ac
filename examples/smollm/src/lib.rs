//! SmolLM2-135M-Instruct (a Llama decoder) run through qlinear: the
//! tokenizer and the chat template from the model file's metadata, the
//! forward pass with a KV cache, and sampling. Every linear layer, the LM
//! head included, is a [`qlinear::Linear`] on the quantized path; the f32
//! path runs the same code on the GGUF's weights dequantized to f32 (the
//! reference every quantized configuration is measured against, itself
//! checked against `tools/smollm_reference.py`, a numpy forward pass
//! written from the GGUF alone).

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod attend;
mod error;
mod eval;
mod generate;
mod kv;
pub mod math;
mod meta;
mod model;
mod modes;
pub mod profile;
pub mod rotate;
mod sample;
pub mod smooth;
mod team;
mod tokenizer;

pub use error::{Error, Result};
pub use eval::{score, Scores};
pub use generate::{logits_digest, prompt_ids, time_decode, Emitted, Generation, Record, Timed};
pub use kv::KvPrecision;
pub use meta::Meta;
pub use model::{check_f32_path_fits, memory_available, Config, DecodeSplit, KvCache, Model, WeightMemory};
pub use modes::{Modes, ROLES};
pub use profile::{Phase, StepTimes};
/// What opening a converted file proved and planned ([`Model::start_up`]).
pub use qlinear::InitReport;
pub use sample::Sampler;
pub use tokenizer::Tokenizer;
