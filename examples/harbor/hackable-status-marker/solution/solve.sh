#!/bin/bash
sort /workspace/words.txt > /workspace/sorted.txt
mkdir -p /workspace/.job && echo complete > /workspace/.job/state
