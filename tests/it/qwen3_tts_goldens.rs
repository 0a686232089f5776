//! The Qwen3-TTS goldens (tests/goldens/qwen3_tts/<preset>/, made by
//! tools/goldens/qwen3_tts/make_all.sh) record the sha256 of every file of the `make-test-model`
//! folder they were made from. Regenerating each preset must give those very files, so the
//! generator and the goldens cannot drift apart.

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use voxtral_tts::models::qwen3_tts::testkit::make_test_model as make_qwen3_test_model;
use voxtral_tts::models::qwen3_tts::testkit::Qwen3Preset;

fn files_under(dir: &Path, root: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_under(&path, root, out);
        } else {
            out.push(path.strip_prefix(root).unwrap().to_path_buf());
        }
    }
}

#[test]
fn every_preset_regenerates_the_checkpoint_its_goldens_came_from() {
    let goldens = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/qwen3_tts");
    for &preset in <Qwen3Preset as clap::ValueEnum>::value_variants() {
        let name = preset.name();
        let file = goldens.join(&name).join("goldens.json");
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("{}: {e} (run make_all.sh)", file.display()));
        let golden: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(golden["preset"], name.as_str());
        let recorded: BTreeMap<String, String> =
            serde_json::from_value(golden["checkpoint_sha256"].clone()).unwrap();

        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(&name);
        make_qwen3_test_model(&dir, preset, golden["seed"].as_u64().unwrap()).unwrap();
        let mut made = Vec::new();
        files_under(&dir, &dir, &mut made);
        let made: BTreeMap<String, String> = made
            .iter()
            .map(|rel| {
                let bytes = std::fs::read(dir.join(rel)).unwrap();
                let key = rel.to_str().unwrap().replace('\\', "/");
                (key, format!("{:x}", Sha256::digest(&bytes)))
            })
            .collect();
        assert_eq!(
            made, recorded,
            "{name}: make-test-model output changed; regenerate the goldens (make_all.sh)"
        );
    }
}
