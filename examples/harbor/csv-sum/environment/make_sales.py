"""Write sales.csv: 40 rows whose amounts are fixed (the verifier knows their sum)."""

rows = [("north" if i % 2 else "south", (i * 37) % 101) for i in range(40)]
with open("/workspace/sales.csv", "w") as out:
    out.write("region,amount\n")
    out.writelines(f"{region},{amount}\n" for region, amount in rows)
