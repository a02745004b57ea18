#!/usr/bin/env bash
# Starts the example CRM and the gateway, runs the demo, stops both.
set -euo pipefail
cd "$(dirname "$0")/../.."
log=$(mktemp -d)
bin/crm -listen 127.0.0.1:9001 >"$log/crm.log" 2>&1 & crm=$!
CRM_URL=http://127.0.0.1:9001 bin/idemgate run --config Caddyfile.example --adapter caddyfile >"$log/gateway.log" 2>&1 & gw=$!
trap 'kill $gw $crm 2>/dev/null; wait 2>/dev/null; rm -rf "$log"' EXIT
bin/demo -gateway http://127.0.0.1:8080 -upstream http://127.0.0.1:9001
