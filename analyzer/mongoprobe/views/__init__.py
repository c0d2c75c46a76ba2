"""Every renderer: shell tables, the latency table, plots, heat maps, flame graphs, the HTML report."""
