#!/bin/bash
echo one > /workspace/notes.txt
