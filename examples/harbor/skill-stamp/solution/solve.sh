#!/bin/bash
echo 'ZQ-7:sealed' > /workspace/stamp.txt
