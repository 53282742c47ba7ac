//! `qlinear-smollm MODEL... --eval TEXT`: every model's perplexity and
//! top-1 agreement with the first on the same windows of TEXT, as a
//! markdown table, and with `--json FILE` the rows (each scored token's
//! −ln p included) and a side file of the tokens scored, for a peer scored
//! on the same positions (`tools/llamacpp_smollm.py`).

use std::time::Instant;

use qlinear_smollm::Tokenizer;

use crate::{load, text_tokens, Args};

/// `--eval TEXT`: see the module's comment.
pub(crate) fn eval(args: &Args, text: &std::path::Path) -> Result<(), String> {
    let (reference, meta) = load(&args.models[0], args)?;
    let tokenizer = Tokenizer::from_meta(&meta).map_err(|e| e.to_string())?;
    if args.window < 4 || args.window > reference.config.context {
        return Err(format!(
            "--window {} must be 4 to the context ({})",
            args.window, reference.config.context
        ));
    }
    let tokens = text_tokens(&tokenizer, text, args.eval_tokens)?;
    let mut rows = vec![];
    let mut first: Option<qlinear_smollm::Scores> = None;
    println!("| model | layers | perplexity | vs first | top-1 agreement |");
    println!("|---|---|--:|--:|--:|");
    for spec in &args.models {
        let model = if rows.is_empty() {
            None
        } else {
            Some(load(spec, args)?.0)
        };
        let model = model.as_ref().unwrap_or(&reference);
        let t = Instant::now();
        let s = qlinear_smollm::score(model, &tokens, args.window).map_err(|e| format!("{spec}: {e}"))?;
        let base = first.get_or_insert_with(|| s.clone());
        let (ppl, agree) = (s.perplexity(), s.agreement(base));
        let rel = ppl / base.perplexity() - 1.0;
        println!(
            "| {spec} | {} | {ppl:.4} | {:+.2} % | {:.2} % |",
            model.description,
            rel * 100.0,
            agree * 100.0
        );
        eprintln!(
            "{spec}: scored {} positions in {:.1} s",
            s.top1.len(),
            t.elapsed().as_secs_f64()
        );
        rows.push(serde_json::json!({
            "model": spec,
            "layers": model.description,
            "perplexity": ppl,
            "relative_to_first": rel,
            "top1_agreement": agree,
            "tokens": tokens.len(),
            "window": args.window,
            "scored": s.top1.len(),
            "text": text.display().to_string(),
            "token_nll": s.token_nll,
        }));
    }
    if let Some(path) = &args.json {
        let body = serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())?;
        std::fs::write(path, body).map_err(|e| format!("{}: {e}", path.display()))?;
        // the tokens scored and the first model's top-1 tokens, for a peer
        // scored on the same positions (tools/llamacpp_smollm.py)
        let side = path.with_extension("tokens.json");
        let first = first.map(|f| f.top1).unwrap_or_default();
        let body = serde_json::json!({
            "tokens": tokens,
            "window": args.window,
            "reference_top1": first,
            "text": text.display().to_string(),
        });
        std::fs::write(&side, body.to_string()).map_err(|e| format!("{}: {e}", side.display()))?;
    }
    Ok(())
}
