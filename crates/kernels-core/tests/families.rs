//! The family declaration (`FAMILIES`): each row agrees with the table's
//! entry it names, and what is derived from the rows (the lists, the
//! proofs a call needs, the weights of a scheme) is what the rows say.

use qlinear_kernels_core::{Activations, Gemm, KernelFamily, Weights, FAMILIES, SCALAR};
use qlinear_quant_recipe::QScheme;

#[test]
fn every_row_sits_at_its_familys_index_and_names_it_once() {
    for (i, spec) in FAMILIES.iter().enumerate() {
        assert_eq!(spec.family as usize, i);
        assert_eq!(KernelFamily::ALL[i], spec.family);
        assert_eq!(spec.family.spec().name, spec.name);
        assert_eq!(spec.family.to_string(), spec.name);
    }
    let mut names: Vec<&str> = FAMILIES.iter().map(|s| s.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), FAMILIES.len(), "family names are unique");
}

#[test]
fn the_matrix_families_are_the_rows_with_an_entry_in_order() {
    let with_entry: Vec<KernelFamily> = FAMILIES.iter().filter(|s| s.gemm.is_some()).map(|s| s.family).collect();
    assert_eq!(KernelFamily::GEMM.to_vec(), with_entry);
    assert_eq!(
        KernelFamily::GEMM.to_vec(),
        [
            KernelFamily::W8A8,
            KernelFamily::W4A8,
            KernelFamily::W4A8Grouped,
            KernelFamily::W8A16,
            KernelFamily::W4A16,
            KernelFamily::W4A16Grouped
        ]
    );
    for family in KernelFamily::ALL {
        assert_eq!(
            SCALAR.gemm(family).is_some(),
            KernelFamily::GEMM.contains(&family),
            "{family}"
        );
    }
}

#[test]
fn each_matrix_entry_takes_the_operands_its_row_declares() {
    for family in KernelFamily::GEMM {
        let spec = family.spec();
        let weights = spec.weights.expect("a matrix family reads weights");
        let entry = SCALAR.gemm(family).expect("a matrix family has an entry");
        assert!(entry.takes(weights, spec.activations), "{family}: {entry:?}");
        // and no other operands: the other activations, or the other width
        let other = match spec.activations {
            Activations::F32 => Activations::Quantized,
            _ => Activations::F32,
        };
        assert!(!entry.takes(weights, other), "{family}");
        let narrower = if weights.bits() == 8 { Weights::Q4 } else { Weights::Q8 };
        assert!(!entry.takes(narrower, spec.activations), "{family}");
    }
}

#[test]
fn gemm_takes_by_hand() {
    let w8a8 = Gemm::Q8Q8(SCALAR.gemm_w8a8);
    assert!(w8a8.takes(Weights::Q8, Activations::Quantized));
    assert!(!w8a8.takes(Weights::Q8, Activations::F32));
    assert!(!w8a8.takes(Weights::Q8, Activations::Codes));
    assert!(!w8a8.takes(Weights::Q4Grouped, Activations::Quantized));
    let w4a16 = Gemm::F32Q4(SCALAR.gemm_w4a16_grouped);
    assert!(w4a16.takes(Weights::Q4, Activations::F32));
    assert!(w4a16.takes(Weights::Q4Grouped, Activations::F32));
    assert!(!w4a16.takes(Weights::Q8, Activations::F32));
}

#[test]
fn a_call_needs_the_quantizer_exactly_where_it_quantizes_its_activations() {
    for family in KernelFamily::ALL {
        let needs = family.needs();
        assert_eq!(needs[0], family);
        let quantizes = family.spec().activations == Activations::Quantized;
        assert_eq!(needs.len(), 1 + usize::from(quantizes), "{family}: {needs:?}");
        if quantizes {
            assert_eq!(needs[1], KernelFamily::QuantizeActivations);
        }
    }
    assert_eq!(
        KernelFamily::W4A8Grouped.needs(),
        [KernelFamily::W4A8Grouped, KernelFamily::QuantizeActivations]
    );
    assert_eq!(KernelFamily::W8A16.needs(), [KernelFamily::W8A16]);
    assert_eq!(
        KernelFamily::QuantizeActivations.needs(),
        [KernelFamily::QuantizeActivations]
    );
}

#[test]
fn the_rows_say_what_each_family_reads() {
    use KernelFamily as F;
    let read = |f: KernelFamily| {
        (
            f.weights(),
            f.spec().activations,
            f.max_k().is_some(),
            f.float_activations(),
        )
    };
    assert_eq!(read(F::W8A8), (Some(Weights::Q8), Activations::Quantized, true, false));
    assert_eq!(read(F::W4A8), (Some(Weights::Q4), Activations::Quantized, true, false));
    assert_eq!(
        read(F::W4A8Grouped),
        (Some(Weights::Q4Grouped), Activations::Quantized, true, false)
    );
    assert_eq!(read(F::W8A16), (Some(Weights::Q8), Activations::F32, false, true));
    assert_eq!(
        read(F::W4A16Grouped),
        (Some(Weights::Q4Grouped), Activations::F32, false, true)
    );
    assert_eq!(read(F::DotI8Q4), (Some(Weights::Q4), Activations::Codes, true, false));
    // the quantizer takes f32 rows but is no matrix family
    assert_eq!(read(F::QuantizeActivations), (None, Activations::F32, false, false));
    // the panel entries are W4A8's, grouped and per channel
    let with_panels: Vec<KernelFamily> = F::ALL
        .into_iter()
        .filter(|&f| (f.spec().panels)(&SCALAR).is_some())
        .collect();
    assert_eq!(with_panels, [F::W4A8, F::W4A8Grouped]);
}

#[test]
fn a_schemes_weights_and_their_width() {
    assert_eq!(Weights::of(QScheme::Q8), Weights::Q8);
    assert_eq!(Weights::of(QScheme::Q4), Weights::Q4);
    assert_eq!(Weights::of(QScheme::Q4Grouped(32)), Weights::Q4Grouped);
    assert_eq!(Weights::of(QScheme::Q4Grouped(2)), Weights::Q4Grouped);
    assert_eq!(Weights::ALL.map(Weights::bits), [8, 4, 4]);
}
