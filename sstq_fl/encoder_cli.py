"""``sstq-fl encoders``: the listing of registered encoders, ``encoders check`` (the conformance kit) and
``encoders recommend`` (a ranking for a d, ε, cohort and bit budget).  The encoder modules load when a command runs,
not when the parser is built."""

from __future__ import annotations

import argparse
from typing import Any

from .argtypes import at_least_100, item_list, positive_float, positive_int, probability, seed_int
from .console import print_json


def cmd_encoders(args: argparse.Namespace) -> int:
    if getattr(args, "encoders_cmd", None) == "check":
        return cmd_encoders_check(args)
    if getattr(args, "encoders_cmd", None) == "recommend":
        return cmd_encoders_recommend(args)
    from .encoders import formula, registry
    from .encoders.base import ENCODERS

    rows: list[dict[str, Any]] = []
    for name, cls in sorted(registry().items()):
        origin = ENCODERS.origin(name)
        rows.append({
            "name": name, "summary": cls.summary, "unbiased": cls.unbiased,
            "unbiased_unless_clipped": cls.unbiased_unless_clipped, "private": cls.private,
            "bits": cls.bits_formula, "bits_text": formula.render(cls.bits_formula) if cls.bits_formula else "",
            "params": {k: {"type": p.type.__name__, "default": p.default, "doc": p.doc,
                           **({"choices": list(p.choices)} if p.choices else {})} for k, p in cls.params.items()},
            "module": cls.__module__,
            "origin": {"kind": origin.kind, "distribution": origin.distribution, "version": origin.version},
        })
    if args.json:
        print_json(rows)
        return 0
    for r in rows:
        bias = "unbiased" if r["unbiased"] else "unbiased unless clipped" if r["unbiased_unless_clipped"] else "biased"
        where = "" if r["origin"]["kind"] == "built-in" else f"  [{ENCODERS.origin(r['name']).label()}]"
        print(f"{r['name']:10s} {bias}{'' if r['private'] else ', NOT private'}  — {r['summary']}{where}")
        if r["bits"]:
            print(f"    bits_formula = \"{r['bits']}\"" + (f"  ({r['bits_text']})" if r["bits_text"] != r["bits"] else ""))
        for k, p in r["params"].items():
            ch = f" {{{'|'.join(map(str, p['choices']))}}}" if "choices" in p else ""
            print(f"    {k}={p['default']}{ch}: {p['doc']}")
    for line in ENCODERS.refused().values():
        print(line)
    return 0


def cmd_encoders_check(args: argparse.Namespace) -> int:
    """``encoders check SPEC``: one line per conformance check; exit 1 if any fails."""
    from .checks import check_array
    from .testing import check_encoder

    check_array(f"{args.trials} messages at d = {args.dim}", args.trials * args.dim)
    report = check_encoder(args.spec, dim=args.dim, epsilon=args.epsilon, radius=args.radius, seed=args.seed,
                           trials=args.trials, audit_trials=args.audit_trials, alpha=args.alpha,
                           checks=args.checks or None)
    print(f"{report.spec} (d={args.dim}, ε={args.epsilon:g}, R={args.radius:g}):")
    for line in report.lines():
        print(line)
    return 0 if report.passed else 1


def cmd_encoders_recommend(args: argparse.Namespace) -> int:
    """``encoders recommend``: every registered encoder's best candidate for the setting, ranked."""
    from .checks import check_array
    from .encoders.recommend import recommend, table

    check_array(f"{args.trials} messages at d = {args.dim}", args.trials * args.dim)
    rows = recommend(args.dim, args.epsilon, args.clients, bits=args.bits, radius=args.radius, trials=args.trials,
                     names=args.encoders or None)
    if args.json:
        print_json([r.as_dict() for r in rows])
    else:
        print(table(rows, dim=args.dim, epsilon=args.epsilon, clients=args.clients, bits=args.bits), end="")
    return 0


def encoders_parser(sub: Any) -> None:
    """``encoders`` (the listing) and ``encoders check``."""
    e = sub.add_parser("encoders", help="list registered encoders (plug-ins marked with their distribution), or check one")
    e.add_argument("--json", action="store_true", help="print the listing as JSON")
    e.set_defaults(fn=cmd_encoders)
    es = e.add_subparsers(dest="encoders_cmd")
    c = es.add_parser("check", help="run the conformance kit on one encoder: one PASS/FAIL/SKIP line per check")
    c.add_argument("spec", help="encoder spec, name[:key=value,...]")
    c.add_argument("--dim", type=positive_int, default=6, help="dimension d")
    c.add_argument("--epsilon", type=positive_float, default=1.0, help="per-message ε")
    c.add_argument("--clip", dest="radius", type=positive_float, default=1.0, help="clip norm C: the encoder's radius")
    c.add_argument("--seed", type=seed_int, default=0, help="public run seed of the encoder")
    c.add_argument("--trials", type=at_least_100, default=20000, help="messages per input for the mean, MSE and law checks")
    c.add_argument("--audit-trials", type=at_least_100, default=20000, help="audit messages per input for the ε audit")
    c.add_argument("--alpha", type=probability, default=1e-6,
                   help="false-failure probability of each statistical check for a conforming encoder")
    c.add_argument("--checks", type=item_list, default=None, help="space-separated subset of the checks (default: all)")
    c.set_defaults(fn=cmd_encoders)
    r = es.add_parser("recommend", help="rank every registered encoder by the MSE of the decoded mean for a d, ε, "
                      "cohort and bit budget, with bits per message and encode cost")
    r.add_argument("--dim", type=positive_int, required=True, help="dimension d of the client vectors")
    r.add_argument("--epsilon", type=positive_float, required=True, help="per-message ε")
    r.add_argument("--clients", type=positive_int, required=True, help="clients n whose messages are averaged")
    r.add_argument("--bits", type=positive_int, default=None, help="at most this many bits per message (default: none)")
    r.add_argument("--clip", dest="radius", type=positive_float, default=1.0,
                   help="clip norm C: the encoders' radius (the input has norm C)")
    r.add_argument("--trials", type=at_least_100, default=400, help="messages per measured (not declared) MSE")
    r.add_argument("--encoders", type=item_list, default=None, help="space-separated encoder names (default: all)")
    r.add_argument("--json", action="store_true", help="print the rows as JSON")
    r.set_defaults(fn=cmd_encoders)
