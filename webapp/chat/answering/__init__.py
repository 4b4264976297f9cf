"""An answer's life once a send started it: its task, its writes, who hears of it, its end."""
