//! Opening in place with an arrangement: which Q4 tensors are offered, what
//! `load_arranged` hands back, and that `load` and `load_arranged` refuse
//! each other's tensors.

use super::*;
use qlinear_quant_recipe::Q4Scales;

/// The arrangement of these tests: each offered tensor's bytes reversed,
/// and a grouped one's scales too, scale by scale (any permutation will
/// do; the reader must not care which).
fn reversing(offered: &mut Vec<(String, usize, usize, GroupSize)>) -> impl FnMut(Q4InPlace<'_>) -> bool + '_ {
    move |t| {
        assert_eq!(t.codes.len(), t.n * t.k / 2, "{}", t.prefix);
        offered.push((t.prefix.to_string(), t.n, t.k, t.group));
        t.codes.reverse();
        match (t.group, t.scales) {
            (GroupSize::Group(g), Some(scales)) => {
                assert_eq!(scales.len(), 2 * t.n * (t.k / g), "{}", t.prefix);
                let mut pairs: Vec<[u8; 2]> = scales.chunks_exact(2).map(|p| [p[0], p[1]]).collect();
                pairs.reverse();
                scales.copy_from_slice(pairs.as_flattened());
            }
            (GroupSize::PerChannel, None) => {}
            (group, scales) => panic!("{}: {group:?} offered scales {:?}", t.prefix, scales.map(|s| s.len())),
        }
        true
    }
}

#[test]
fn an_arranged_q4_tensor_keeps_its_checks_and_reads_its_codes_as_arranged() {
    let dir = tempfile::tempdir().unwrap();
    for (n, k) in [(3, 8), (5, 7), (2, 64), (0, 4)] {
        let tensors = tensors_for(n, k);
        let path = write(dir.path(), &format!("ar_{n}_{k}.safetensors"), &tensors);
        let bytes = std::fs::read(&path).unwrap();
        let mut offered = vec![];
        let mapped = QuantizedFile::open_in_place_arranged(&path, &mut reversing(&mut offered)).unwrap();
        let mut offered_again = vec![];
        let in_memory =
            QuantizedFile::from_bytes_in_place_arranged(bytes.clone(), &mut reversing(&mut offered_again)).unwrap();
        offered.sort_by(|a, b| a.0.cmp(&b.0));
        let mut want: Vec<_> = tensors
            .iter()
            .filter_map(|(p, t)| match t {
                // an odd K has a pad nibble: not offered
                QuantizedWeight::Q4(q) if k % 2 == 0 => Some((p.clone(), n, k, q.group_size())),
                _ => None,
            })
            .collect();
        want.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(offered, want, "[{n}, {k}]");
        offered_again.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(offered_again, want, "[{n}, {k}] in memory");
        for file in [&mapped, &in_memory] {
            for (prefix, t) in &tensors {
                let arranged = want.iter().any(|w| &w.0 == prefix);
                assert_eq!(file.is_arranged(prefix), arranged, "{prefix}");
                let qweight = format!("{prefix}.qweight");
                if !arranged {
                    assert_eq!(&file.load(prefix).unwrap(), t, "{prefix}");
                    let e = file.load_arranged(prefix).unwrap_err();
                    assert!(
                        matches!(&e, FormatError::NotArranged { tensor } if *tensor == qweight),
                        "{e:?}"
                    );
                    continue;
                }
                let QuantizedWeight::Q4(q) = t else { unreachable!() };
                let a = file.load_arranged(prefix).unwrap();
                assert_eq!((a.n, a.k), (n, k));
                match (&a.scales, q.scales()) {
                    (ArrangedScales::InPlace { group, bytes }, Q4Scales::Grouped { group: g, scales }) => {
                        assert_eq!(group, g, "{prefix}");
                        let want: Vec<u8> = scales.iter().rev().flat_map(|s| s.to_le_bytes()).collect();
                        assert_eq!(bytes.as_slice(), want, "{prefix}: the scales as arranged");
                        assert!(bytes.is_shared() || want.is_empty(), "{prefix}: scales read in place");
                    }
                    (ArrangedScales::Natural(natural), per_channel @ Q4Scales::PerChannel(_)) => {
                        assert_eq!(natural, per_channel, "{prefix}: natural scales");
                    }
                    (got, want) => panic!("{prefix}: {got:?} for {want:?}"),
                }
                let mut reversed = q.packed().to_vec();
                reversed.reverse();
                assert_eq!(a.codes.as_slice(), reversed, "{prefix}: the codes as arranged");
                assert!(
                    a.codes.is_shared() || a.codes.as_slice().is_empty(),
                    "{prefix}: read in place"
                );
                let e = file.load(prefix).unwrap_err();
                assert!(
                    matches!(&e, FormatError::Arranged { tensor } if *tensor == qweight),
                    "{e:?}"
                );
                assert!(e.to_string().starts_with(&qweight), "{e}");
            }
            // inspect's validation covers arranged tensors too
            assert!(file.validate().iter().all(|(_, r)| r.is_ok()));
        }
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "the file is never written");
    }
}

/// A tensor the arrangement declines stays natural, read with `load`.
#[test]
fn a_declined_tensor_is_read_as_before() {
    let tensors = tensors_for(4, 8);
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "declined.safetensors", &tensors);
    let file = QuantizedFile::open_in_place_arranged(&path, &mut |t| t.prefix == "m.q4").unwrap();
    assert!(file.is_arranged("m.q4") && !file.is_arranged("m.q4g4"));
    for (prefix, t) in &tensors {
        if prefix != "m.q4" {
            assert_eq!(&file.load(prefix).unwrap(), t);
        }
    }
}

/// The in-place reader reads the file, it does not map it: truncating or
/// rewriting the file afterwards reaches no weight (a map would raise
/// SIGBUS on the lost pages).
#[test]
fn a_file_truncated_after_it_was_opened_in_place_changes_nothing() {
    let tensors = tensors_for(32, 64);
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "truncated.safetensors", &tensors);
    let file = QuantizedFile::open_in_place(&path).unwrap();
    let arranged = QuantizedFile::open_in_place_arranged(&path, &mut |t| {
        t.codes.reverse();
        true
    })
    .unwrap();
    let loaded: Vec<_> = tensors.iter().map(|(p, _)| file.load(p).unwrap()).collect();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(0)
        .unwrap();
    std::fs::write(&path, b"something else entirely").unwrap();
    for ((prefix, t), got) in tensors.iter().zip(&loaded) {
        assert_eq!(got, t, "{prefix}");
        assert_eq!(&file.load(prefix).unwrap(), t, "{prefix}: loaded after the truncation");
        if arranged.is_arranged(prefix) {
            let QuantizedWeight::Q4(q) = t else { unreachable!() };
            let mut reversed = q.packed().to_vec();
            reversed.reverse();
            assert_eq!(arranged.load_arranged(prefix).unwrap().codes.as_slice(), reversed);
        }
    }
}

/// The header's metadata alone, from the whole file, from its header's
/// bytes alone, and from its path; `None` for bytes that hold no header.
#[test]
fn a_files_metadata_reads_from_its_header_alone() {
    let dir = tempfile::tempdir().unwrap();
    let tensors = tensors_for(4, 64);
    let path = write(dir.path(), "meta.safetensors", &tensors);
    let bytes = std::fs::read(&path).unwrap();
    let whole = QuantizedFile::open(&path).unwrap().metadata_map().clone();
    assert!(whole.keys().any(|k| k.ends_with(".qscheme")), "{whole:?}");
    let header_len = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    assert_eq!(QuantizedFile::header_metadata(&bytes).as_ref(), Some(&whole));
    assert_eq!(
        QuantizedFile::header_metadata(&bytes[..header_len]).as_ref(),
        Some(&whole)
    );
    assert_eq!(QuantizedFile::header_metadata_of(&path).as_ref(), Some(&whole));
    // cut inside the header, no length, a length past the limit, not JSON
    assert_eq!(QuantizedFile::header_metadata(&bytes[..header_len - 1]), None);
    assert_eq!(QuantizedFile::header_metadata(&bytes[..5]), None);
    assert_eq!(QuantizedFile::header_metadata(&u64::MAX.to_le_bytes()), None);
    let mut garbage = 4u64.to_le_bytes().to_vec();
    garbage.extend_from_slice(b"{no}");
    assert_eq!(QuantizedFile::header_metadata(&garbage), None);
    // a header without metadata: an empty map; metadata of a non-string: none
    let mut plain = 2u64.to_le_bytes().to_vec();
    plain.extend_from_slice(b"{}");
    assert_eq!(QuantizedFile::header_metadata(&plain), Some(HashMap::new()));
    let odd = br#"{"__metadata__":{"a":1}}"#;
    let mut bad = (odd.len() as u64).to_le_bytes().to_vec();
    bad.extend_from_slice(odd);
    assert_eq!(QuantizedFile::header_metadata(&bad), None);
    assert_eq!(QuantizedFile::header_metadata_of(dir.path().join("missing")), None);
}
