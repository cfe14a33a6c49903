#!/usr/bin/env bash
# 64-byte UDP datagrams from one client core (0) to a receiver on core 1: blaster blast
# (--rate max, GSO when available; 24-byte header + 40-byte payload) vs iperf3
# (-u -b 0 -l 64) vs sockperf throughput (-m 64). Prints packets/s sent and received.
source "$(dirname "$0")/lib.sh"
need iperf3 iperf3; need sockperf sockperf
header
I_TX=""; I_RX=""; S_TX=""; S_RX=""; B_TX=""; B_RX=""
for i in $(seq "$RUNS"); do
    P=$(free_port)
    taskset -c 1 iperf3 -s -p "$P" -1 >/dev/null 2>&1 & SP=$!; sleep 0.5
    taskset -c 0 iperf3 -c 127.0.0.1 -p "$P" -u -b 0 -l 64 -t "$DUR" -J > "$OUT/i.json" 2>/dev/null || true
    wait $SP 2>/dev/null || true
    read -r tx rx < <(python3 -c "import json; r=json.load(open('$OUT/i.json'))['end']; s=r['sum']; print(s['packets']/s['seconds'], (s['packets']-s['lost_packets'])/s['seconds'])")
    I_TX+="$tx "; I_RX+="$rx "

    P=$(free_port)
    taskset -c 1 sockperf server -i 127.0.0.1 -p "$P" >/dev/null 2>&1 & SP=$!; sleep 0.5
    taskset -c 0 sockperf throughput -i 127.0.0.1 -p "$P" -m 64 -t "$DUR" > "$OUT/s.txt" 2>&1 || true
    kill $SP 2>/dev/null; wait $SP 2>/dev/null || true
    tx=$(grep -o 'Message Rate is [0-9]*' "$OUT/s.txt" | awk '{print $4}' | head -1)
    S_TX+="${tx:-0} "

    P=$(free_port)
    "$B" sink --udp --listen 127.0.0.1:$P --cores 1 --mode count --json "$OUT/sink.json" 2>/dev/null & SP=$!; sleep 0.5
    "$B" run --proto udp --no-response --rate max --target 127.0.0.1:$P --cores 0 --connections 1 \
        --payload-size 40 --duration ${DUR}s --quiet --json "$OUT/b.json" >/dev/null 2>&1 || true
    kill -INT $SP; wait $SP 2>/dev/null || true
    B_TX+="$(python3 -c "import json; print(json.load(open('$OUT/b.json'))['udp']['sent_pps'])") "
    B_RX+="$(python3 -c "import json; print(json.load(open('$OUT/sink.json'))['received_pps'])") "
done
printf '%-40s %-26s %-26s\n' tool "packets/s sent" "packets/s received"
printf '%-40s %-26s %-26s\n' "iperf3 -u -b 0 -l 64" "$(med "$I_TX")" "$(med "$I_RX")"
printf '%-40s %-26s %-26s\n' "sockperf throughput -m 64" "$(med "$S_TX")" "(not reported)"
printf '%-40s %-26s %-26s\n' "blaster --no-response --rate max" "$(med "$B_TX")" "$(med "$B_RX")"
echo "blaster sends with UDP GSO: $(python3 -c "import json; print(json.load(open('$OUT/b.json'))['udp']['gso'])") (up to 128 datagrams per send)"
echo "packets/s sent, blaster / iperf3: $(ratio "$B_TX" "$I_TX") (target >= 3)"
