"""apply's report: the table and --json say what each node is, its architecture included (issue 30)."""

from __future__ import annotations

from rich.console import Console

from sparkguard.cli.commands.apply import print_report
from sparkguard.facts import NodeInfo
from sparkguard.run.runner import ApplyResult, HostResult


def test_the_table_and_json_name_each_nodes_architecture():
    spark = NodeInfo(memory_total_bytes=int(121.7 * 2**30), arch="aarch64", distro_id="ubuntu", distro_version="24.04")
    halo = NodeInfo(memory_total_bytes=int(125.0 * 2**30), arch="x86_64", distro_id="debian", distro_version="13")
    result = ApplyResult(dry=False, hosts=[HostResult("spark-01", node=spark), HostResult("halo-01", node=halo),
                                           HostResult("down-01", errors=["unreachable"])])
    console = Console(record=True, width=220)
    print_report(result, console)
    rows = {line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[1:-1]]
            for line in console.export_text().replace("┃", "│").splitlines() if line.count("│") > 3}
    header = rows.pop("host")
    assert rows["spark-01"][header.index("arch")] == "aarch64"
    assert rows["halo-01"][header.index("arch")] == "x86_64"
    assert rows["down-01"][header.index("arch")] == "?"
    hosts = {h["host"]: h for h in result.as_dict()["hosts"]}
    assert hosts["spark-01"]["node"]["arch"] == "aarch64" and hosts["down-01"]["node"] is None
