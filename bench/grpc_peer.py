"""The peer of bench/grpc.sh: a fixed-rate gRPC unary client in Python grpcio, calling
/blaster.Echo/Say with an empty message at RATE calls/s for SECONDS on CONNS channels
(round robin), each call issued at its absolute instant (start + i / RATE) with
`future()`, so a slow answer never delays the next call. Prints
"calls N ok M achieved R p99_ms P" when every call has ended, P the 99th percentile of
the calls' latencies counted from their intended instants (as blaster counts).

usage: grpc_peer.py HOST:PORT RATE SECONDS CONNS"""
import sys
import threading
import time

import grpc


def main():
    target, rate, secs, conns = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    # Distinct channel arguments keep grpcio from sharing one connection.
    chans = [grpc.insecure_channel(target, options=[("blaster.channel", i)]) for i in range(conns)]
    calls = [c.unary_unary("/blaster.Echo/Say", request_serializer=None, response_deserializer=None)
             for c in chans]
    n = int(rate * secs)
    ok = [0]
    lat = []
    done = threading.Semaphore(0)
    lock = threading.Lock()

    def ended_at(due):
        def ended(f):
            took = time.perf_counter() - due
            if f.code() == grpc.StatusCode.OK:
                with lock:
                    ok[0] += 1
                    lat.append(took)
            done.release()
        return ended

    start = time.perf_counter()
    for i in range(n):
        due = start + i / rate
        wait = due - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        calls[i % conns].future(b"", timeout=10).add_done_callback(ended_at(due))
    for _ in range(n):
        done.acquire()
    elapsed = time.perf_counter() - start
    lat.sort()
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3 if lat else float("nan")
    print(f"calls {n} ok {ok[0]} achieved {ok[0] / elapsed:.0f} p99_ms {p99:.1f}")


if __name__ == "__main__":
    main()
