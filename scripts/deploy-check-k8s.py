#!/usr/bin/env python3
"""Checks deploy/k8s/ without kubectl or a cluster: every manifest parses, has a known
apiVersion/kind and only the fields this script knows (a typo such as `readinesProbe` would be
silently ignored by a lenient apply, so unknown keys fail here), the values have the types and
ranges Kubernetes wants, and the pieces agree with each other and with the rest of the repository:
ports, probes and labels/selectors across Deployment, Service, ServiceMonitor and the plain scrape
job; the image's uid, port and health path (deploy/Dockerfile); the HPA's metric names against
what the Prometheus adapter's rule makes of the metric names the server really exports
(docs/metrics.md's table, each name also found in server/metrics/metrics.c).

usage: scripts/deploy-check-k8s.py [REPO_ROOT]     (prints one line per check; exit 1 on a failure)
Needs PyYAML (scripts/install-deps.sh installs it).
"""
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "k8s"
failures = []


def fail(where, msg):
    failures.append(f"{where}: {msg}")


# ---- a small schema language: the fields these manifests use, with their types ---------------
# A dict maps allowed keys to sub-schemas; [S] is a list of S; a type or tuple of types is a leaf;
# a function is a leaf check returning an error string or None. "*" in a dict allows any key
# whose value matches its schema (labels, annotations).


def quantity(kind):
    cpu = re.compile(r"^([0-9]+(\.[0-9]+)?|[0-9]+m)$")
    mem = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$")

    def check(v):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return None
        if not isinstance(v, str) or not (cpu if kind == "cpu" else mem).match(v):
            return f"not a {kind} quantity: {v!r}"
        return None

    return check


def one_of(*values):
    return lambda v: None if v in values else f"{v!r} not one of {values}"


def port_number(v):
    return None if isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 65535 else f"bad port {v!r}"


def port_ref(v):  # a number, or an IANA_SVC_NAME (at most 15 characters, a letter in it)
    if isinstance(v, int):
        return port_number(v)
    if isinstance(v, str) and re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?", v) and re.search("[a-z]", v):
        return None
    return f"bad port reference {v!r}"


def dns_label(v):
    return None if isinstance(v, str) and re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", v) else f"bad name {v!r}"


def positive_int(v):
    return None if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else f"expected an integer >= 1, got {v!r}"


def nonneg_int(v):
    return None if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else f"expected an integer >= 0, got {v!r}"


def abs_path(v):
    return None if isinstance(v, str) and v.startswith("/") else f"expected a path starting with /, got {v!r}"


LABELS = {"*": str}
METADATA = {"name": dns_label, "namespace": dns_label, "labels": LABELS, "annotations": {"*": str}}
PROBE = {
    "httpGet": {"path": abs_path, "port": port_ref, "scheme": one_of("HTTP", "HTTPS")},
    "initialDelaySeconds": nonneg_int, "periodSeconds": positive_int, "timeoutSeconds": positive_int,
    "failureThreshold": positive_int, "successThreshold": positive_int,
}
RESOURCES = {"cpu": quantity("cpu"), "memory": quantity("memory"), "nvidia.com/gpu": positive_int,
             "amd.com/gpu": positive_int}
CONTAINER = {
    "name": dns_label, "image": str, "imagePullPolicy": one_of("Always", "IfNotPresent", "Never"),
    "args": [str], "command": [str],
    "env": [{"name": str, "value": str}],
    "ports": [{"name": port_ref, "containerPort": port_number, "protocol": one_of("TCP", "UDP", "SCTP")}],
    "startupProbe": PROBE, "readinessProbe": PROBE, "livenessProbe": PROBE,
    "resources": {"requests": RESOURCES, "limits": RESOURCES},
    "securityContext": {"allowPrivilegeEscalation": bool, "readOnlyRootFilesystem": bool,
                        "capabilities": {"drop": [str], "add": [str]}},
    "volumeMounts": [{"name": dns_label, "mountPath": abs_path, "readOnly": bool}],
}
DEPLOYMENT = {
    "apiVersion": str, "kind": str, "metadata": METADATA,
    "spec": {
        "replicas": nonneg_int,
        "selector": {"matchLabels": LABELS},
        "template": {
            "metadata": {"labels": LABELS, "annotations": {"*": str}},
            "spec": {
                "terminationGracePeriodSeconds": nonneg_int,
                "securityContext": {"runAsNonRoot": bool, "runAsUser": nonneg_int, "runAsGroup": nonneg_int,
                                    "fsGroup": nonneg_int, "seccompProfile": {"type": str}},
                "containers": [CONTAINER],
                "volumes": [{"name": dns_label, "emptyDir": dict,
                             "persistentVolumeClaim": {"claimName": dns_label, "readOnly": bool}}],
            },
        },
    },
}
SERVICE = {
    "apiVersion": str, "kind": str, "metadata": METADATA,
    "spec": {"type": one_of("ClusterIP", "NodePort", "LoadBalancer"), "selector": LABELS,
             "ports": [{"name": port_ref, "port": port_number, "targetPort": port_ref,
                        "protocol": one_of("TCP", "UDP", "SCTP")}]},
}
SERVICEMONITOR = {
    "apiVersion": str, "kind": str, "metadata": METADATA,
    "spec": {"selector": {"matchLabels": LABELS},
             "endpoints": [{"port": port_ref, "path": abs_path, "interval": str}]},
}
METRIC_TARGET = {"type": one_of("AverageValue", "Value", "Utilization"), "averageValue": (str, int),
                 "value": (str, int), "averageUtilization": int}
HPA = {
    "apiVersion": str, "kind": str, "metadata": METADATA,
    "spec": {
        "scaleTargetRef": {"apiVersion": str, "kind": str, "name": dns_label},
        "minReplicas": positive_int, "maxReplicas": positive_int,
        "metrics": [{"type": one_of("Pods", "Resource", "Object", "External"),
                     "pods": {"metric": {"name": str}, "target": METRIC_TARGET}}],
        "behavior": {"scaleUp": {"stabilizationWindowSeconds": nonneg_int},
                     "scaleDown": {"stabilizationWindowSeconds": nonneg_int}},
    },
}
CONFIGMAP = {"apiVersion": str, "kind": str, "metadata": METADATA, "data": {"*": str}}
ADAPTER_CONFIG = {
    "rules": [{
        "seriesQuery": str,
        "resources": {"overrides": {"*": {"resource": str}}, "template": str},
        "name": {"matches": str, "as": str},
        "metricsQuery": str,
    }],
}
SCRAPE = {
    "scrape_configs": [{
        "job_name": str, "scrape_interval": str, "metrics_path": abs_path,
        "kubernetes_sd_configs": [{"role": one_of("pod", "endpoints", "service", "node")}],
        "relabel_configs": [{"source_labels": [str], "action": one_of("keep", "drop", "replace"),
                             "regex": str, "replacement": str, "target_label": str}],
    }],
}
KINDS = {
    ("apps/v1", "Deployment"): DEPLOYMENT,
    ("v1", "Service"): SERVICE,
    ("v1", "ConfigMap"): CONFIGMAP,
    ("monitoring.coreos.com/v1", "ServiceMonitor"): SERVICEMONITOR,
    ("autoscaling/v2", "HorizontalPodAutoscaler"): HPA,
}


def check_schema(where, value, schema):
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return fail(where, f"expected a mapping, got {type(value).__name__}")
        for k, v in value.items():
            if k in schema:
                check_schema(f"{where}.{k}", v, schema[k])
            elif "*" in schema:
                if not isinstance(k, str):
                    fail(where, f"key {k!r} is not a string")
                check_schema(f"{where}.{k}", v, schema["*"])
            else:
                fail(where, f"unknown field '{k}' (a typo? this check knows {sorted(schema)})")
    elif isinstance(schema, list):
        if not isinstance(value, list) or not value:
            return fail(where, "expected a non-empty list")
        for i, v in enumerate(value):
            check_schema(f"{where}[{i}]", v, schema[0])
    elif isinstance(schema, (type, tuple)):
        if schema is dict and isinstance(value, dict):
            return
        if not isinstance(value, schema) or (isinstance(value, bool) and schema is not bool):
            fail(where, f"expected {schema}, got {value!r}")
    else:
        err = schema(value)
        if err:
            fail(where, err)


def need(where, cond, msg):
    if not cond:
        fail(where, msg)
    return cond


def parse_quantity(v):
    """Kubernetes quantity -> float (the suffixes these manifests may use)."""
    s = str(v)
    mult = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    m = re.fullmatch(r"([0-9.]+)(m|k|M|G|T|Ki|Mi|Gi|Ti)?", s)
    if not m:
        raise ValueError(s)
    return float(m.group(1)) * mult.get(m.group(2) or "", 1)


# ---- load -------------------------------------------------------------------------------------
objs = {}  # kind -> list of (file, obj)
scrape = None
for f in sorted(K8S.glob("*.yaml")):
    try:
        docs = [d for d in yaml.safe_load_all(f.read_text()) if d is not None]
    except yaml.YAMLError as e:
        fail(f.name, f"does not parse: {e}")
        continue
    for d in docs:
        if isinstance(d, dict) and "scrape_configs" in d:  # a prometheus.yml fragment, not an object
            check_schema(f"{f.name}", d, SCRAPE)
            scrape = d
            continue
        key = (d.get("apiVersion"), d.get("kind")) if isinstance(d, dict) else None
        if need(f.name, key in KINDS, f"unknown apiVersion/kind {key}"):
            where = f"{f.name}:{d['kind']}/{d.get('metadata', {}).get('name')}"
            need(where, isinstance(d.get("metadata", {}).get("name"), str), "metadata.name missing")
            check_schema(where, d, KINDS[key])
            objs.setdefault(d["kind"], []).append((f.name, d))

for kind in ("Deployment", "Service", "ServiceMonitor", "HorizontalPodAutoscaler", "ConfigMap"):
    need("deploy/k8s", len(objs.get(kind, [])) == 1, f"expected exactly one {kind}, found {len(objs.get(kind, []))}")
need("deploy/k8s", scrape is not None, "no plain Prometheus scrape config (scrape_configs)")
if failures:
    print("\n".join("FAIL " + x for x in failures))
    sys.exit(1)

dep = objs["Deployment"][0][1]
svc = objs["Service"][0][1]
smon = objs["ServiceMonitor"][0][1]
hpa = objs["HorizontalPodAutoscaler"][0][1]
adapter_cm = objs["ConfigMap"][0][1]
checks = 0


def check(where, cond, msg):
    global checks
    checks += 1
    return need(where, cond, msg)


# ---- the image: deploy/Dockerfile's uid, port and health path ---------------------------------
dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
uid = re.search(r"useradd\b[^\n]*--uid (\d+)", dockerfile)
expose = re.search(r"^EXPOSE (\d+)", dockerfile, re.M)
entry_port = re.search(r'^ENTRYPOINT \[.*"--port", "(\d+)"', dockerfile, re.M)
health = re.search(r"^HEALTHCHECK(?:.*\\\n)*.*http://127\.0\.0\.1:(\d+)(/\S*)", dockerfile, re.M)
check("deploy/Dockerfile", uid and expose and entry_port and health,
      "cannot find useradd --uid, EXPOSE, ENTRYPOINT --port and HEALTHCHECK URL")
image_port = int(expose.group(1))
check("deploy/Dockerfile", int(entry_port.group(1)) == image_port == int(health.group(1)),
      "EXPOSE, ENTRYPOINT --port and HEALTHCHECK disagree on the port")
health_path = health.group(2)

# ---- Deployment -------------------------------------------------------------------------------
D = "deployment"
spec = dep["spec"]
pod_labels = spec["template"]["metadata"]["labels"]
sel = spec["selector"]["matchLabels"]
check(D, sel and all(pod_labels.get(k) == v for k, v in sel.items()),
      f"selector {sel} does not match the pod template's labels {pod_labels}")
pod = spec["template"]["spec"]
c = pod["containers"][0]
ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
check(D, list(ports.values()) == [image_port], f"container ports {ports} != the image's port {image_port}")
for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
    if check(D, probe in c, f"{probe} missing"):
        hg = c[probe].get("httpGet", {})
        check(D, hg.get("path") == health_path, f"{probe} path {hg.get('path')} != {health_path}")
        p = hg.get("port")
        check(D, p in ports or p in ports.values(), f"{probe} port {p!r} is not a container port")
res = c.get("resources", {})
check(D, "requests" in res and "cpu" in res["requests"] and "memory" in res["requests"], "resources.requests cpu+memory missing")
check(D, "memory" in res.get("limits", {}), "resources.limits.memory missing")
for k in set(res.get("requests", {})) & set(res.get("limits", {})):
    check(D, parse_quantity(res["requests"][k]) <= parse_quantity(res["limits"][k]), f"request {k} above its limit")
sc = pod.get("securityContext", {})
check(D, sc.get("runAsNonRoot") is True, "securityContext.runAsNonRoot must be true (the image runs as non-root)")
check(D, sc.get("runAsUser") == int(uid.group(1)), f"runAsUser {sc.get('runAsUser')} != the image's uid {uid.group(1)}")
check(D, pod.get("terminationGracePeriodSeconds", 30) > 30,
      "terminationGracePeriodSeconds must exceed the server's --drain-timeout (30 s)")
vols = {v["name"] for v in pod.get("volumes", [])}
for m in c.get("volumeMounts", []):
    check(D, m["name"] in vols, f"volumeMount {m['name']} has no volume")
ann = spec["template"]["metadata"].get("annotations", {})
check(D, ann.get("prometheus.io/port") == str(image_port), "prometheus.io/port annotation != the container port")
check(D, ann.get("prometheus.io/path") == "/metrics", "prometheus.io/path annotation != /metrics")

# ---- Service ----------------------------------------------------------------------------------
S = "service"
check(S, svc["spec"]["selector"] and all(pod_labels.get(k) == v for k, v in svc["spec"]["selector"].items()),
      "selector does not select the Deployment's pods")
svc_ports = {p["name"]: p for p in svc["spec"]["ports"]}
for p in svc["spec"]["ports"]:
    t = p.get("targetPort", p["port"])
    check(S, t in ports or t in ports.values(), f"targetPort {t!r} is not a container port")

# ---- ServiceMonitor and the plain scrape job --------------------------------------------------
M = "servicemonitor"
check(M, all(svc["metadata"].get("labels", {}).get(k) == v for k, v in smon["spec"]["selector"]["matchLabels"].items()),
      "selector does not select the Service (its labels)")
for e in smon["spec"]["endpoints"]:
    check(M, e["port"] in svc_ports, f"endpoint port {e['port']!r} is not a Service port name")
    check(M, e.get("path") == "/metrics", "endpoint path != /metrics")
P = "prometheus-scrape"
job = scrape["scrape_configs"][0]
targets = set()
for r in job["relabel_configs"]:
    try:
        re.compile(r.get("regex", "(.*)"))
    except re.error as e:
        fail(P, f"regex {r.get('regex')!r}: {e}")
    if r.get("action") == "keep" and r["source_labels"] == ["__meta_kubernetes_pod_label_app_kubernetes_io_name"]:
        check(P, re.fullmatch(r["regex"], pod_labels.get("app.kubernetes.io/name", "")),
              "keeps no pod with the Deployment's app.kubernetes.io/name")
    if r.get("action") == "keep" and r["source_labels"] == ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"]:
        check(P, re.fullmatch(r["regex"], ann.get("prometheus.io/scrape", "")), "keeps no pod with the Deployment's annotations")
    if "target_label" in r:
        targets.add(r["target_label"])
check(P, {"namespace", "pod"} <= targets, "must set the namespace and pod labels the adapter maps to objects")

# ---- the metrics the server exports -----------------------------------------------------------
doc = (ROOT / "docs" / "metrics.md").read_text()
exported = dict(re.findall(r"^\| `wushkv:([a-z0-9_]+)` \| (gauge|counter|histogram) \|", doc, re.M))
src = (ROOT / "server" / "metrics" / "metrics.c").read_text()
check("docs/metrics.md", len(exported) >= 10, f"found only {len(exported)} metrics in its table")
for name in exported:
    check("server/metrics/metrics.c", f'"{name}"' in src or f"wushkv:{name}{{" in src,
          f"docs/metrics.md lists wushkv:{name}, which metrics.c does not render")

# ---- Prometheus adapter rule -> HPA metrics ---------------------------------------------------
A = "prometheus-adapter-rules"
try:
    adapter = yaml.safe_load(adapter_cm["data"]["config.yaml"])
except (KeyError, yaml.YAMLError) as e:
    fail(A, f"data.config.yaml missing or unparsable: {e}")
    adapter = {"rules": []}
check_schema(f"{A}:config.yaml", adapter, ADAPTER_CONFIG)
produced = {}  # custom metric name -> Prometheus metric name
for i, rule in enumerate(adapter.get("rules", [])):
    where = f"{A}: rule {i}"
    sq = rule["seriesQuery"]
    m = re.search(r'__name__=~"([^"]+)"', sq) or re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{", sq)
    if not check(where, m, f"cannot find the metric name(s) in seriesQuery {sq!r}"):
        continue
    series = [n for n in (f"wushkv:{k}" for k in exported) if re.fullmatch(m.group(1), n)]
    check(where, series, f"seriesQuery {sq!r} selects no metric the server exports")
    for lab in rule["resources"].get("overrides", {}):
        check(where, lab in targets, f"override label {lab!r} is not set by the scrape job")
        check(where, f"{lab}!=\"\"" in sq, f"seriesQuery should require {lab}!=\"\"")
    for tok in ("<<.Series>>", "<<.LabelMatchers>>", "<<.GroupBy>>"):
        check(where, tok in rule["metricsQuery"], f"metricsQuery lacks {tok}")
    as_ = re.sub(r"\$\{(\d+)\}", r"\\g<\1>", rule["name"]["as"])
    for n in series:
        new = re.sub(rule["name"]["matches"], as_, n)
        check(where, re.fullmatch(r"[a-z0-9_]+", new), f"renames {n} to {new!r}, not a valid custom metric name")
        produced[new] = n

H = "hpa"
t = hpa["spec"]["scaleTargetRef"]
check(H, (t["apiVersion"], t["kind"], t["name"]) == (dep["apiVersion"], dep["kind"], dep["metadata"]["name"]),
      f"scaleTargetRef {t} is not the Deployment")
check(H, hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"], "minReplicas > maxReplicas")
kv_metric = False
for mt in hpa["spec"]["metrics"]:
    if not check(H, mt["type"] == "Pods" and "pods" in mt, "only Pods metrics are checked here"):
        continue
    name = mt["pods"]["metric"]["name"]
    prom = produced.get(name)
    if not check(H, prom, f"metric {name!r} is not produced by the adapter rule (it makes {sorted(produced)})"):
        continue
    bare = prom.split(":", 1)[1]
    check(H, exported[bare] == "gauge", f"{prom} is a {exported[bare]}: a Pods AverageValue target wants a gauge")
    tgt = mt["pods"]["target"]
    check(H, tgt["type"] == "AverageValue" and "averageValue" in tgt, "target must be an AverageValue")
    if bare == "kv_cache_usage_perc":
        kv_metric = True
        v = parse_quantity(tgt["averageValue"])
        check(H, 0 < v <= 1, f"kv_cache_usage_perc is 0..1; target {tgt['averageValue']} = {v}")
check(H, kv_metric, "no metric on the KV pool (wushkv_kv_cache_usage_perc)")

if failures:
    print("\n".join("FAIL " + x for x in failures))
    print(f"deploy-check-k8s: {len(failures)} failed of {checks} checks")
    sys.exit(1)
print(f"deploy-check-k8s: {sum(len(v) for v in objs.values())} objects + the scrape job, {checks} checks passed; "
      f"HPA metrics {[m['pods']['metric']['name'] for m in hpa['spec']['metrics']]} <- adapter <- "
      f"{sorted(produced.values())}")
