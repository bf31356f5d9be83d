"""`python -m devcluster.emulator --host 127.0.0.1 --port P --seed S [...]`."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from types import FrameType

from devcluster.emulator.exposition import RenderOptions
from devcluster.emulator.server import EmulatorServer, serve, serve_tls


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m devcluster.emulator",
        description="Telemetry + CMDB emulator for the metrics-sched dev cluster.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed on stderr)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cmdb-token-file", type=Path,
                        help="file holding the CMDB API token; without it the CMDB accepts any request")
    parser.add_argument("--node-exporter-instance", choices=("ip", "name"), default="ip",
                        help='instance label: "<node ip>:9100" (default) or "<node name>:9100"')
    parser.add_argument("--dcgm-hostname-label", choices=("hostname", "Hostname"), default="hostname")
    parser.add_argument("--tls-port", type=int,
                        help="also serve HTTPS here (metrics.k8s.io and the Custom Metrics APIs, behind the "
                             "apiserver's aggregation)")
    parser.add_argument("--tls-cert-file", type=Path, help="serving certificate for --tls-port")
    parser.add_argument("--tls-key-file", type=Path, help="its private key")
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.tls_port is not None and (args.tls_cert_file is None or args.tls_key_file is None):
        raise SystemExit("--tls-port needs --tls-cert-file and --tls-key-file")
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    token = args.cmdb_token_file.read_text().strip() if args.cmdb_token_file else None
    if token == "":
        raise SystemExit(f"{args.cmdb_token_file} is empty")
    options = RenderOptions(dcgm_hostname_label=args.dcgm_hostname_label,
                            node_exporter_instance=args.node_exporter_instance)
    server = serve(args.host, args.port, seed=args.seed, cmdb_token=token, options=options)

    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    log = logging.getLogger("devcluster.emulator")
    log.info("listening on %s (seed %d)", server.url, args.seed)
    tls_server: EmulatorServer | None = None
    if args.tls_port is not None:
        tls_server = serve_tls(server.emulator, args.host, args.tls_port, args.tls_cert_file, args.tls_key_file)
        tls_server.start()
        log.info("listening on %s", tls_server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        if tls_server is not None:
            tls_server.close()
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
