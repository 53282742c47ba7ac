//! `QLINEAR_QUANT_MODE` picks the default mode of a new `Linear`, and a mode
//! that cannot run the weight is refused when the layer is built. One test in
//! its own binary: it sets the process environment.

use qlinear::{Error, Linear, QScheme, QuantLinearMode, QUANT_MODE_ENV};

#[test]
fn the_mode_environment_variable_is_honoured() {
    let w: Vec<f32> = (0..32).map(|i| i as f32 - 16.0).collect();
    std::env::set_var(QUANT_MODE_ENV, "w8a16");
    assert_eq!(
        Linear::from_f32(QScheme::Q8, 4, 8, &w, None).unwrap().mode(),
        QuantLinearMode::W8A16
    );
    let e = Linear::from_f32(QScheme::Q4, 4, 8, &w, None).unwrap_err();
    assert!(
        matches!(
            e,
            Error::ModeMismatch {
                mode: QuantLinearMode::W8A16,
                ..
            }
        ),
        "{e}"
    );
    std::env::set_var(QUANT_MODE_ENV, "w5a5");
    let e = Linear::from_f32(QScheme::Q8, 4, 8, &w, None).unwrap_err();
    assert!(matches!(e, Error::Dispatch(_)) && e.to_string().contains("w5a5"), "{e}");
    std::env::remove_var(QUANT_MODE_ENV);
    assert_eq!(
        Linear::from_f32(QScheme::Q4, 4, 8, &w, None).unwrap().mode(),
        QuantLinearMode::W4A8
    );
}
