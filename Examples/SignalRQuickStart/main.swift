// The SignalR quick start as a new executable's main.swift (top-level code): with SignalRHub,
// `try await connection.start()` is the async start, so the invoke that follows finds the
// connection up. Run: swift run signalr-quickstart http://localhost:5000/hub
import SignalRHub

let url = CommandLine.arguments.dropFirst().first ?? "http://localhost:5000/hub"
let connection = HubConnectionBuilder().withUrl(url: url).build()
connection.on("receive") { (message: String) in print("received: \(message)") }
try await connection.start()
let sum: Int = try await connection.invoke(method: "add", arguments: 1, 2)
print("add(1, 2) = \(sum)")
await connection.stop()
print("stopped")
