"""The message plane (DESIGN.md section 3): message schema and codec (`messages`), the broker
process (`broker`), client helpers (`client`), endpoints file (`endpoints`), JSON logging
(`logs`) and test helpers (`testing`)."""
