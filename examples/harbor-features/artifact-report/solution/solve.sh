#!/bin/bash
set -eu
mkdir -p /srv/report
{ echo "count: $(wc -l < data.txt)"; sort -r data.txt; } > /srv/report/summary.txt
