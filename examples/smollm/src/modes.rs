//! Which mode each linear layer of a converted model runs in: one mode for
//! all of them (or each weight's own default), and overrides by the layer's
//! role, so that a layer whose input W8A8 quantizes badly (SmolLM2's
//! `ffn_down`, whose input is SwiGLU's product with the widest columns:
//! docs/BENCHMARKS.md, "Accuracy") can keep its int8 weights and take float
//! activations while the rest runs W8A8.

use std::fmt;
use std::str::FromStr;

use qlinear::QuantLinearMode;

use crate::Error;

/// The roles a Llama layer's name ends with (`blk.3.ffn_down` is
/// `ffn_down`); `output` and `token_embd` are the LM head (a separate
/// `output` matrix, or the tied token table).
pub const ROLES: [&str; 9] = [
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
    "output",
    "token_embd",
];

/// A model's modes: `all` for every layer that no override names (`None`:
/// each weight's default mode), then `(role, mode)` overrides, a role at
/// most once.
///
/// Written `MODE`, `MODE,ROLE=MODE,…` or `ROLE=MODE,…` (modes as
/// [`QuantLinearMode`] parses them: `W8A8`, `W4A8`, `W8A16`, `W4A16`), e.g.
/// `W8A8,ffn_down=W8A16`. A mode that a layer's weight cannot run (W4A8 on
/// a q8 weight) is an error when the model is built, naming the layer; the
/// LM head follows its weight's width ([`Modes::for_layer`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Modes {
    /// The mode of the layers no override names; `None`: each weight's default.
    pub all: Option<QuantLinearMode>,
    /// Overrides by role (one of [`ROLES`]).
    pub by_role: Vec<(String, QuantLinearMode)>,
}

impl From<Option<QuantLinearMode>> for Modes {
    fn from(all: Option<QuantLinearMode>) -> Modes {
        Modes { all, by_role: vec![] }
    }
}

impl Modes {
    /// The mode asked for layer `prefix` (`blk.3.ffn_down`, `output`): its
    /// role's override, else `all`.
    pub fn for_layer(&self, prefix: &str) -> Option<QuantLinearMode> {
        let role = prefix.rsplit('.').next().unwrap_or(prefix);
        self.by_role
            .iter()
            .find(|(r, _)| r == role)
            .map(|&(_, m)| m)
            .or(self.all)
    }

    /// Whether nothing is asked: every layer in its weight's default mode.
    pub fn is_default(&self) -> bool {
        self.all.is_none() && self.by_role.is_empty()
    }
}

impl FromStr for Modes {
    type Err = Error;

    /// # Errors
    /// [`Error::Modes`] naming the part at fault: an empty part, a mode
    /// that does not parse, a role not in [`ROLES`], a role given twice, or
    /// two modes for all layers.
    fn from_str(s: &str) -> Result<Modes, Error> {
        let bad = |why: String| Error::Modes(format!("{s:?}: {why}"));
        let mode = |m: &str| m.parse::<QuantLinearMode>().map_err(|e| bad(e.to_string()));
        let mut modes = Modes::default();
        for part in s.split(',') {
            match part.split_once('=') {
                None if part.is_empty() => return Err(bad("an empty part".into())),
                None if modes.all.is_some() => return Err(bad(format!("{part}: a second mode for all layers"))),
                None => modes.all = Some(mode(part)?),
                Some((role, m)) => {
                    if !ROLES.contains(&role) {
                        return Err(bad(format!("{role:?} is not a layer role ({})", ROLES.join(", "))));
                    }
                    if modes.by_role.iter().any(|(r, _)| r == role) {
                        return Err(bad(format!("{role} given twice")));
                    }
                    modes.by_role.push((role.to_string(), mode(m)?));
                }
            }
        }
        Ok(modes)
    }
}

impl fmt::Display for Modes {
    /// As parsed, modes in their display form (`w8a8,ffn_down=w8a16`);
    /// `default` when nothing is asked.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = self.all.iter().map(|m| m.to_string()).collect();
        parts.extend(self.by_role.iter().map(|(r, m)| format!("{r}={m}")));
        if parts.is_empty() {
            f.write_str("default")
        } else {
            f.write_str(&parts.join(","))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use QuantLinearMode::*;

    #[test]
    fn parses_a_mode_for_all_and_overrides_by_role() {
        let m: Modes = "W8A8,ffn_down=W8A16".parse().unwrap();
        assert_eq!(m.all, Some(W8A8));
        assert_eq!(m.for_layer("blk.0.ffn_down"), Some(W8A16));
        assert_eq!(m.for_layer("blk.29.ffn_down"), Some(W8A16));
        assert_eq!(m.for_layer("blk.0.ffn_up"), Some(W8A8));
        assert_eq!(m.for_layer("output"), Some(W8A8));
        assert_eq!(m.to_string(), "w8a8,ffn_down=w8a16");

        let only: Modes = "output=W8A16".parse().unwrap();
        assert_eq!(only.for_layer("blk.1.attn_q"), None);
        assert_eq!(only.for_layer("output"), Some(W8A16));
        assert!(!only.is_default());

        let all: Modes = "W4A16".parse().unwrap();
        assert_eq!(all, Modes::from(Some(W4A16)));
        assert!(Modes::from(None).is_default());
        assert_eq!(Modes::default().to_string(), "default");
    }

    #[test]
    fn every_malformed_spec_is_refused_naming_its_part() {
        for (spec, names) in [
            ("", "empty part"),
            ("W8A8,", "empty part"),
            ("W8A9", "W8A9"),
            ("W8A8,W8A16", "second mode"),
            ("ffn_dwn=W8A16", "ffn_dwn"),
            ("ffn_down=W8A16,ffn_down=W8A8", "given twice"),
            ("ffn_down=fast", "fast"),
        ] {
            let e = spec.parse::<Modes>().unwrap_err().to_string();
            assert!(e.contains(names) && e.starts_with("modes"), "{spec}: {e}");
        }
    }
}
