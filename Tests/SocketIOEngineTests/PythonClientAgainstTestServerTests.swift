import Foundation
import RealtimeTesting
import SocketIOEngine
import Testing

/// python-socketio 5.18.1's AsyncClient (code we did not write) against our in-process
/// `SocketIOTestServer`: the server is checked by a reference client, over each transport setup.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct PythonClientAgainstTestServerTests {
    @Test(arguments: ["polling", "websocket", "polling,websocket"])
    func referenceClientScenarios(transports: String) async throws {
        // python-engineio 4.15.1's polling client can lose its own CLOSE: when disconnect() runs while
        // a POST is in flight (here: the refused CONNECT's POST, answered after the refusal went out on
        // the GET), its write loop sees the state change and exits without sending the queued CLOSE.
        // Its long-poll GET then ends only with the server's next ping, so pings come every 2 s here
        // instead of 25 s (seen in CI as a 15 s TimeoutError in "namespace with auth refused").
        var options = SocketIOTestServer.Options()
        options.pingInterval = .seconds(2)
        let server = try await SocketIOTestServer.start(options: options)
        let client = try await PythonPeer.start(scriptPath: peerScript("sio_client.py"), arguments: [server.url, transports], waitForPort: false)
        let (output, status) = await client.waitForExit(limit: .seconds(150))
        await server.stop()
        let lines = output.split(separator: "\n").map(String.init)
        for failure in lines where failure.hasPrefix("FAIL") {
            Issue.record("python-socketio AsyncClient: \(failure)")
        }
        if lines.contains(where: { $0.hasPrefix("FAIL") }) {
            // The client's engine.io/socket.io log ("LOG" lines) goes to the run's output: an issue's
            // comment shows only its first line.
            for line in lines { print("[sio_client.py \(transports)] \(line)") }
        }
        #expect(lines.last == "DONE", "the client did not finish: \(output)")
        #expect(status == 0)
        var expected = ["OK connect and welcome", "OK ack with binary in nested position", "OK event with binary from the server",
            "OK server asks the client with an ack", "OK emits", "OK server-initiated disconnect",
            "OK namespace with auth accepted", "OK namespace with auth refused"]
        if transports == "polling,websocket" { expected.append("OK upgrade to websocket") }
        #expect(Set(lines.filter { $0.hasPrefix("OK") }) == Set(expected))
        #expect(server.recorded == [[1], [2], [3]])
    }

    @Test(arguments: ["polling", "websocket"])
    func referenceClientReconnectsAfterTheServerRestarts(transports: String) async throws {
        var server = try await SocketIOTestServer.start()
        let client = try await PythonPeer.start(scriptPath: peerScript("sio_client.py"), arguments: [server.url, transports, "restart"], waitForPort: false)
        var output: [String] = []
        while true {
            let line = await client.nextLine()
            output.append(line)
            if line == "READY" || line.isEmpty { break }
        }
        try #require(output.last == "READY", "the client did not connect: \(output)")
        let port = server.port
        // A crash, then a new server on the same port: no close packet tells the client to stay away.
        server.dropAllConnections()
        await server.stop()
        var options = SocketIOTestServer.Options()
        options.port = port
        server = try await SocketIOTestServer.start(options: options)
        let (rest, status) = await client.waitForExit(limit: .seconds(150))
        await server.stop()
        let lines = output + rest.split(separator: "\n").map(String.init)
        #expect(lines.contains("OK reconnect after the server restarts"), "\(lines)")
        #expect(lines.last == "DONE")
        #expect(status == 0)
    }
}
