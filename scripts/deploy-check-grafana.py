#!/usr/bin/env python3
"""Checks deploy/grafana/ (Grafana cannot run here: its image is not reachable) in two parts.

Static (always): the provisioning YAML and the dashboard JSON parse, and the fields Grafana reads
have the right types and agree with each other and with deploy/compose.yaml: the datasource's
URL is the compose Prometheus service and port, every panel and target names that datasource's
uid, the dashboard provider's path is where compose mounts deploy/grafana/dashboards, panel ids
and refIds are unique, grid positions fit 24 columns, every $variable used is defined.

With --prometheus URL --start T (after a load, scripts/deploy-test-compose.sh): EVERY panel
target's PromQL, with the dashboard's variables substituted the way Grafana does ($model_name ->
its allValue, $__rate_interval -> max(4 x scrape interval, step + scrape interval)), is evaluated
as a range query from T to now against that real Prometheus; each must return at least one series
with a finite value. The template variable's label_values() is asked too.

usage: scripts/deploy-check-grafana.py [--prometheus URL --start UNIX_TIME] [--step S]
Prints one line per check; exit 1 on a failure. Needs PyYAML.
"""
import argparse
import json
import math
import re
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
G = ROOT / "deploy" / "grafana"
failures = []
passed = 0


def check(where, cond, msg):
    global passed
    if cond:
        passed += 1
    else:
        failures.append(f"{where}: {msg}")
        print(f"FAIL {where}: {msg}")
    return cond


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def duration_s(s):
    m = re.fullmatch(r"(\d+)(ms|s|m|h)", s)
    return int(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m.group(2)]


ap = argparse.ArgumentParser()
ap.add_argument("--prometheus", help="base URL of a Prometheus that scraped a loaded wushkv")
ap.add_argument("--start", type=float, help="range start (Unix seconds): the load's start")
ap.add_argument("--step", type=int, default=5, help="range query step in seconds (default 5)")
args = ap.parse_args()

# ---- compose.yaml: the Prometheus service and where Grafana's files are mounted ----------------
compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
svcs = compose["services"]
prom_port = None
for p in svcs["prometheus"].get("ports", []):
    prom_port = int(str(p).rsplit(":", 1)[-1])
mounts = {}
for v in svcs["grafana"].get("volumes", []):
    src, dst = str(v).split(":")[:2]
    mounts[str((ROOT / "deploy" / src).resolve())] = dst

# ---- datasource provisioning ------------------------------------------------------------------
W = "provisioning/datasources"
files = sorted((G / "provisioning" / "datasources").glob("*.y*ml"))
check(W, files, "no datasource YAML")
datasources = []
for f in files:
    d = yaml.safe_load(f.read_text())
    check(f.name, d.get("apiVersion") == 1, "apiVersion must be 1")
    for ds in d.get("datasources", []):
        for k, t in (("name", str), ("type", str), ("uid", str), ("url", str), ("access", str)):
            check(f.name, isinstance(ds.get(k), t), f"datasource field {k} missing or not {t.__name__}")
        datasources.append(ds)
check(W, len(datasources) == 1, f"expected one datasource, found {len(datasources)}")
ds = datasources[0]
check(W, ds["type"] == "prometheus" and ds["access"] in ("proxy", "direct"), "not a proxied prometheus datasource")
u = urllib.parse.urlparse(ds["url"])
check(W, u.hostname in svcs and u.port == prom_port,
      f"url {ds['url']} is not the compose Prometheus service (prometheus:{prom_port})")
scrape_s = duration_s(ds.get("jsonData", {}).get("timeInterval", "15s"))
prom_cfg = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
check(W, duration_s(prom_cfg["global"]["scrape_interval"]) == scrape_s,
      "jsonData.timeInterval != deploy/prometheus/prometheus.yml's scrape_interval")

# ---- dashboard provider -----------------------------------------------------------------------
W = "provisioning/dashboards"
files = sorted((G / "provisioning" / "dashboards").glob("*.y*ml"))
check(W, files, "no dashboard provider YAML")
for f in files:
    d = yaml.safe_load(f.read_text())
    check(f.name, d.get("apiVersion") == 1, "apiVersion must be 1")
    for p in d.get("providers", []):
        check(f.name, isinstance(p.get("name"), str) and p.get("type") == "file", "provider needs a name and type: file")
        path = p.get("options", {}).get("path")
        check(f.name, path == mounts.get(str((G / "dashboards").resolve())),
              f"options.path {path} is not where compose mounts deploy/grafana/dashboards ({mounts})")
check("compose.yaml", mounts.get(str((G / "provisioning").resolve())) == "/etc/grafana/provisioning",
      "deploy/grafana/provisioning is not mounted at /etc/grafana/provisioning")

# ---- the dashboard ----------------------------------------------------------------------------
W = "dashboards/wushkv.json"
dash = json.loads((G / "dashboards" / "wushkv.json").read_text())
for k, t in (("uid", str), ("title", str), ("schemaVersion", int), ("panels", list), ("templating", dict)):
    check(W, isinstance(dash.get(k), t), f"{k} missing or not {t.__name__}")
variables = {v["name"]: v for v in dash["templating"].get("list", [])}
for name, v in variables.items():
    check(W, v.get("type") == "query" and v.get("datasource", {}).get("uid") == ds["uid"],
          f"variable {name}: not a query on the provisioned datasource")
KNOWN_TYPES = {"row", "timeseries", "gauge", "stat", "bargauge", "table"}
ids, targets = set(), []
for p in dash["panels"]:
    where = f"{W} panel {p.get('id')} {p.get('title')!r}"
    check(where, p.get("type") in KNOWN_TYPES, f"type {p.get('type')!r} unknown")
    check(where, is_int(p.get("id")) and p["id"] not in ids, "id missing or not unique")
    ids.add(p.get("id"))
    gp = p.get("gridPos", {})
    check(where, all(is_int(gp.get(k)) for k in "hwxy") and gp.get("x", 0) + gp.get("w", 99) <= 24,
          f"gridPos {gp} does not fit 24 columns")
    if p.get("type") == "row":
        continue
    check(where, isinstance(p.get("title"), str) and p["title"], "no title")
    check(where, p.get("datasource", {}).get("uid") == ds["uid"], "panel datasource is not the provisioned uid")
    check(where, isinstance(p.get("fieldConfig", {}).get("defaults", {}).get("unit"), str), "no unit")
    ts = p.get("targets", [])
    check(where, ts, "no targets")
    refs = [t.get("refId") for t in ts]
    check(where, len(set(refs)) == len(refs) and all(refs), f"refIds {refs} missing or repeated")
    for t in ts:
        check(where, t.get("datasource", {}).get("uid") == ds["uid"], f"target {t.get('refId')}: not the provisioned uid")
        expr = t.get("expr")
        if check(where, isinstance(expr, str) and expr, f"target {t.get('refId')}: no expr"):
            for var in re.findall(r"\$\{?(\w+)", expr):
                check(where, var in variables or var.startswith("__"), f"expr uses undefined ${var}")
            targets.append((p["title"], t["refId"], t.get("legendFormat", ""), expr))
n_panels = sum(1 for p in dash["panels"] if p.get("type") != "row")
print(f"static: {len(ids)} panels and rows ({n_panels} panels, {len(targets)} queries), "
      f"{len(variables)} variable(s), datasource uid {ds['uid']!r}: {passed} checks, {len(failures)} failed")

# ---- every query against the real Prometheus --------------------------------------------------
if args.prometheus:
    base = args.prometheus.rstrip("/")

    def api(path, params):
        url = f"{base}/api/v1/{path}?{urllib.parse.urlencode(params, doseq=True)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            return json.load(e)

    rate_interval = f"{int(max(4 * scrape_s, args.step + scrape_s))}s"  # Grafana's $__rate_interval

    def substitute(expr):
        for name, v in variables.items():
            expr = re.sub(r"\$\{" + name + r"(:[a-z]+)?\}|\$" + name + r"\b", v.get("allValue") or ".*", expr)
        return expr.replace("$__rate_interval", rate_interval)

    end = time.time()
    for name, v in variables.items():
        m = re.fullmatch(r"label_values\(([^,]+),\s*(\w+)\)", v.get("definition", ""))
        if check(f"variable {name}", m, f"definition {v.get('definition')!r} is not label_values(metric, label)"):
            r = api(f"label/{m.group(2)}/values", {"match[]": m.group(1), "start": args.start, "end": end})
            vals = [x for x in r.get("data", []) if x]
            check(f"variable {name}", r.get("status") == "success" and vals, f"label_values gives {r}")
            print(f"variable ${name}: {vals}")
    for title, ref, legend, expr in targets:
        q = substitute(expr)
        r = api("query_range", {"query": q, "start": args.start, "end": end, "step": args.step})
        where = f"{title!r} {ref} ({legend or 'no legend'})"
        if not check(where, r.get("status") == "success", f"query failed: {r.get('error')} -- {q}"):
            continue
        series = r["data"]["result"]
        finite = [float(v) for s in series for _, v in s["values"] if math.isfinite(float(v))]
        if check(where, finite, f"no data ({len(series)} series, no finite value) -- {q}"):
            print(f"ok   {where}: {len(series)} series, {len(finite)} points, last {finite[-1]:.4g}, max {max(finite):.4g}")
    print(f"prometheus: {len(targets)} queries evaluated over {end - args.start:.0f} s "
          f"(step {args.step} s, $__rate_interval {rate_interval})")

print(f"deploy-check-grafana: {passed} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
