"""The dtcc compile flags that spell the plan a `dtcc compile --plan auto`
log chose: its "plan auto: MESH, zero Z[, SCHEDULE]: ..." line."""
import re
import sys

for line in open(sys.argv[1]):
    m = re.match(r"plan auto: ([a-z]+=[0-9]+(?:,[a-z]+=[0-9]+)*), zero ([0-3])"
                 r"(?:, (1f1b|gpipe|zb-h1|interleaved V=[0-9]+))?: (.*)", line)
    if not m:
        continue
    flags = ["--mesh", m.group(1), "--zero", m.group(2)]
    if m.group(3):
        schedule = m.group(3).split(" V=")
        flags += ["--pipeline-schedule", schedule[0]]
        if len(schedule) > 1:
            flags += ["--virtual-stages", schedule[1]]
    if "by the ILP" in m.group(4):
        flags += ["--layout-search", "ilp"]
    elif "by coordinate descent" in m.group(4):
        layouts = re.findall(r", ([^,=\s]+=(?:rows|cols|whole))", m.group(4))
        sys.exit("a plan by coordinate descent has no explicit spelling: " +
                 " ".join(layouts))
    print(" ".join(flags))
    sys.exit(0)
sys.exit("no 'plan auto: MESH, zero Z' line in " + sys.argv[1])
