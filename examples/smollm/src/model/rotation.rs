//! A rotated model's Hadamard rotations ([`crate::rotate`]): which the file
//! declares, and the model's inputs rotated before the projections read
//! them.

use rayon::prelude::*;

use super::{rows_of, Config, Model};
use crate::rotate::{Hadamard, HADAMARD, ROTATION_KEY};
use crate::{Error, Meta, Result};

/// The Hadamard rotations of a rotated model ([`crate::rotate`]): of the
/// inputs of width `hidden` (the attention's and the MLP's projections
/// after their norms, the output projection's heads, the LM head) and of
/// `ffn_down`'s input.
pub(super) struct Rotation {
    pub(super) hidden: Hadamard,
    pub(super) ffn: Hadamard,
}

/// Which of a [`Rotation`]'s matrices rotates a buffer's rows.
#[derive(Clone, Copy)]
pub(super) enum Width {
    Hidden,
    Ffn,
}

impl Rotation {
    /// The rotation `meta` declares ([`ROTATION_KEY`]), or none. Errors: a
    /// value other than [`HADAMARD`], a width with no matrix.
    pub(super) fn from_meta(meta: &Meta, c: &Config) -> Result<Option<Rotation>> {
        match meta.get(ROTATION_KEY) {
            None => Ok(None),
            Some(v) if v.as_str() == Some(HADAMARD) => Rotation::new(c).map(Some),
            Some(v) => Err(Error::Metadata {
                key: ROTATION_KEY.into(),
                reason: format!("is {v}: this build rotates by {HADAMARD:?} only"),
            }),
        }
    }

    pub(super) fn new(c: &Config) -> Result<Rotation> {
        Ok(Rotation {
            hidden: Hadamard::new(c.hidden, "the hidden state (llama.embedding_length)")?,
            ffn: Hadamard::new(c.ffn, "ffn_down's input (llama.feed_forward_length)")?,
        })
    }
}

impl Model {
    /// On a rotated model, `x ← x H` for each row of `x` (`H` of `width`,
    /// [`crate::rotate`]), the rows spread over the pool; nothing otherwise.
    pub(super) fn rotate_inputs(&self, x: &mut [f32], width: Width) {
        if let Some(r) = &self.rotation {
            let h = match width {
                Width::Hidden => &r.hidden,
                Width::Ffn => &r.ffn,
            };
            if x.len() == h.len() {
                // one row (a decode step's, on the thread that holds it)
                h.apply(x);
            } else {
                rows_of(x, h.len()).for_each(|row| h.apply(row));
            }
        }
    }

    /// Whether the model is rotated ([`crate::rotate`]).
    pub fn is_rotated(&self) -> bool {
        self.rotation.is_some()
    }
}
