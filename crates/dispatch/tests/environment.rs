//! `QLINEAR_QUANT_MODE` (one test in this binary: it sets the process
//! environment, which no other test here reads).

use qlinear_dispatch::{quant_mode_from_environment, DispatchError, QuantLinearMode, QUANT_MODE_ENV};

#[test]
fn quant_mode_from_the_environment() {
    std::env::remove_var(QUANT_MODE_ENV);
    assert_eq!(quant_mode_from_environment(), Ok(None));
    for (text, mode) in [
        ("w8a8", QuantLinearMode::W8A8),
        ("W4A8", QuantLinearMode::W4A8),
        (" w8a16 ", QuantLinearMode::W8A16),
        ("w4a16", QuantLinearMode::W4A16),
    ] {
        std::env::set_var(QUANT_MODE_ENV, text);
        assert_eq!(quant_mode_from_environment(), Ok(Some(mode)), "{text:?}");
    }
    std::env::set_var(QUANT_MODE_ENV, "w3a3");
    let e = quant_mode_from_environment().unwrap_err();
    assert_eq!(e, DispatchError::UnknownMode { value: "w3a3".into() });
    assert_eq!(
        e.to_string(),
        "unknown quant mode \"w3a3\"; valid modes: w8a8, w4a8, w8a16, w4a16"
    );
    std::env::remove_var(QUANT_MODE_ENV);
}
