#!/bin/bash
cat /workspace/seed.txt >> /workspace/notes.txt
