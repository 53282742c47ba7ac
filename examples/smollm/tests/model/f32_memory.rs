//! The f32 path refuses a GGUF file whose weights, dequantized, would not
//! fit in the memory the process can still be given, before allocating
//! any (`check_f32_path_fits`).

use qlinear::gguf::GgufFile;
use qlinear_smollm::{check_f32_path_fits, Error};

const F32: u32 = 0;
const Q4_0: u32 = 2;

/// A GGUF v3 file with no metadata and `tensors` (name, ggml dims, type,
/// data bytes), each at the next 32-byte offset.
fn gguf(tensors: &[(&str, &[u64], u32, usize)]) -> GgufFile {
    let string = |s: &str| {
        let mut v = (s.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(s.as_bytes());
        v
    };
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(3u32.to_le_bytes());
    bytes.extend((tensors.len() as u64).to_le_bytes());
    bytes.extend(0u64.to_le_bytes());
    let mut offset = 0u64;
    for (name, dims, ty, len) in tensors {
        bytes.extend(string(name));
        bytes.extend((dims.len() as u32).to_le_bytes());
        dims.iter().for_each(|d| bytes.extend(d.to_le_bytes()));
        bytes.extend(ty.to_le_bytes());
        bytes.extend(offset.to_le_bytes());
        offset += (*len as u64).div_ceil(32) * 32;
    }
    while !bytes.len().is_multiple_of(32) {
        bytes.push(0);
    }
    for (_, _, _, len) in tensors {
        bytes.extend(vec![0u8; len.div_ceil(32) * 32]);
    }
    GgufFile::from_bytes(bytes).expect("a well-formed GGUF file")
}

/// A Q4_0 embedding of 8 rows × 64 (512 weights, 16 blocks of 18 bytes)
/// and an f32 tensor of 8 weights; `head`: an `output.weight` like the
/// embedding, else the head is tied to it.
fn model(head: bool) -> GgufFile {
    let mut tensors: Vec<(&str, &[u64], u32, usize)> = vec![
        ("token_embd.weight", &[64, 8], Q4_0, 16 * 18),
        ("blk.0.ffn_norm.weight", &[8], F32, 32),
    ];
    if head {
        tensors.push(("output.weight", &[64, 8], Q4_0, 16 * 18));
    }
    gguf(&tensors)
}

#[test]
fn the_f32_path_is_refused_where_its_weights_would_not_fit() {
    // tied head: the embedding twice (the table and the head's copy)
    let tied = model(false);
    let needed = 4 * (512 + 8 + 512);
    check_f32_path_fits(&tied, Some(needed)).unwrap();
    check_f32_path_fits(&tied, None).unwrap();
    let e = check_f32_path_fits(&tied, Some(needed - 1)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::F32TooLarge {
                elements: 1032,
                needed: 4128,
                available: 4127
            }
        ),
        "{e:?}"
    );
    let message = e.to_string();
    assert!(
        message.starts_with("the f32 path needs 4128 bytes (0.0 MiB)"),
        "{message}"
    );
    assert!(message.contains("1032 weights"), "{message}");
    assert!(message.contains("4127 bytes"), "{message}");
    assert!(message.contains("qlinear convert"), "{message}");
    // a head of its own is counted once, as a tensor of the file
    let own = model(true);
    check_f32_path_fits(&own, Some(needed)).unwrap();
    assert!(matches!(
        check_f32_path_fits(&own, Some(needed - 1)),
        Err(Error::F32TooLarge { elements: 1032, .. })
    ));
    // a file smaller than memory that expands past it (Q4_0: 4.5 bits a
    // weight, 32 in f32)
    let file_bytes = 2 * 16 * 18 + 32;
    assert!(file_bytes < 1000 && needed > 4000);
    assert!(check_f32_path_fits(&own, Some(1000)).is_err());
}
