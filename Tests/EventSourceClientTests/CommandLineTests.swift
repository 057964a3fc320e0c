import Foundation
import NIOCore
import NIOSSL
import RealtimeTesting
import Testing

/// The `realtime` command exits non-zero with the error on stderr when a connection fails for good.
@Suite(.serialized, .timeLimit(.minutes(1))) struct CommandLineTests {
    func run(_ arguments: [String]) async throws -> (status: Int32, stderr: String) {
        let (status, _, stderr) = try await RealtimeCommandLine.run(arguments)
        return (status, stderr)
    }

    @Test func socketioReportsARefusedUpgradeAndExitsNonZero() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/socket.io/") { _ in .text("no sockets here", status: 403) }
        let (status, stderr) = try await run(["socketio", server.baseURL, "--transport", "websocket", "--reconnect-attempts", "1"])
        #expect(status == 1)
        #expect(stderr.contains("HTTP 403"), "\(stderr)")
        #expect(stderr.contains("reconnectGaveUp"), "\(stderr)")
    }

    /// `--eio 3` speaks to socket.io 2.x servers: the reference 2.x peer (python-socketio 4.6.1,
    /// python-engineio 3.14.2, in `.venv-sio2`) acks an emit.
    @Test func socketioSpeaksToASocketIO2ServerWithEIO3() async throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("SocketIOEngineTests/Peers/sio2_server.py").path
        let peer = try await PythonPeer.start(scriptPath: script, python: PythonPeer.socketIO2Python)
        defer { Task { await peer.stop() } }
        let result = try await RealtimeCommandLine.run(
            ["socketio", "http://127.0.0.1:\(peer.port)", "--eio", "3", "--emit", "echo", "[1,\"two\"]", "--ack"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("ack [1,\"two\"]"), "\(result.stdout)")
        let wrong = try await RealtimeCommandLine.run(["socketio", "http://127.0.0.1:\(peer.port)", "--eio", "5"])
        #expect(wrong.status == 64, "\(wrong.stderr)")
    }

    /// As curl: a first connection that fails ends the command at once, in plain words.
    @Test func sseFailsFastOnAClosedPort() async throws {
        let closed = try RefusingPort()
        let (status, stderr) = try await run(["sse", "http://127.0.0.1:\(closed.port)/"])
        #expect(status == 1)
        #expect(stderr.contains("connection refused (errno 111)"), "\(stderr)")
        #expect(stderr.filter { $0 == "(" }.count == stderr.filter { $0 == ")" }.count, "balanced: \(stderr)")
        #expect(!stderr.contains("(reconnecting)"), "\(stderr)")
    }

    @Test func socketioFailsFastOnAClosedPort() async throws {
        let closed = try RefusingPort()
        let (status, stderr) = try await run(["socketio", "http://127.0.0.1:\(closed.port)", "--transport", "websocket"])
        #expect(status == 1)
        #expect(stderr.contains("could not connect") && stderr.contains("no --retry given"), "\(stderr)")
        #expect(stderr.contains("connection refused (errno 111)"), "\(stderr)")
        // No reconnects before the first connection: one attempt, counted by a proxy in front.
        let proxy = try await FaultProxy.start(targetPort: closed.port)
        defer { Task { await proxy.stop() } }
        let (proxiedStatus, _) = try await run(["socketio", "http://127.0.0.1:\(proxy.port)", "--transport", "websocket"])
        #expect(proxiedStatus == 1)
        #expect(proxy.statistics.connectionsAccepted == 1, "\(proxy.statistics)")
    }

    @Test func socketioRetriesTheFirstConnectionWhenAsked() async throws {
        let closed = try RefusingPort()
        let proxy = try await FaultProxy.start(targetPort: closed.port)
        defer { Task { await proxy.stop() } }
        let (status, stderr) = try await run(["socketio", "http://127.0.0.1:\(proxy.port)", "--transport", "websocket", "--retry", "2"])
        #expect(status == 1)
        #expect(stderr.contains("after 2 retries"), "\(stderr)")
        #expect(proxy.statistics.connectionsAccepted == 3, "\(proxy.statistics)")
    }

    @Test func spreadbotFailsFastOnAClosedPort() async throws {
        let closed = try RefusingPort()
        let started = ContinuousClock.now
        let (status, stderr) = try await run(["spreadbot", "http://127.0.0.1:\(closed.port)", "--path", "prices", "--transport", "websocket"])
        #expect(status == 1)
        #expect(ContinuousClock.now - started < .seconds(20), "no reconnects before the first connection")
        #expect(stderr.contains("could not connect (no --retry given)"), "\(stderr)")
        #expect(stderr.contains("connection refused (errno 111)"), "\(stderr)")
    }

    /// Every transport is tried once per attempt: one attempt, then two retries, is three
    /// connections per transport.
    @Test func spreadbotRetriesTheFirstConnectionWhenAsked() async throws {
        let closed = try RefusingPort()
        let proxy = try await FaultProxy.start(targetPort: closed.port)
        defer { Task { await proxy.stop() } }
        let (status, stderr) = try await run(["spreadbot", "http://127.0.0.1:\(proxy.port)", "--path", "prices", "--transport", "sse", "--retry", "2"])
        #expect(status == 1)
        #expect(stderr.contains("could not connect (after 2 retries)"), "\(stderr)")
        #expect(proxy.statistics.connectionsAccepted == 3, "\(proxy.statistics)")
    }

    /// `--retry 2`: the first connection is tried twice more (through a proxy whose target refuses,
    /// which counts the attempts).
    @Test func sseRetriesTheFirstConnectionWhenAsked() async throws {
        let closed = try RefusingPort()
        let proxy = try await FaultProxy.start(targetPort: closed.port)
        defer { Task { await proxy.stop() } }
        let (status, stderr) = try await run(["sse", "http://127.0.0.1:\(proxy.port)/", "--retry", "2"])
        #expect(status == 1)
        #expect(proxy.statistics.connectionsAccepted == 3, "\(proxy.statistics)")
        #expect(stderr.components(separatedBy: "(reconnecting)").count - 1 == 2, "\(stderr)")
    }

    /// A self-signed certificate: "certificate not trusted", without a path of the machine
    /// swift-nio-ssl was built on.
    @Test func sseSaysCertificateNotTrusted() async throws {
        let certificates = try await TestCertificates.make()
        defer { certificates.remove() }
        let tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMFile(certificates.selfSigned.certificatePath).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: certificates.selfSigned.keyPath, format: .pem)))
        let server = try await ScriptedHTTPServer.start(tls: tls)
        defer { Task { await server.stop() } }
        let (status, stderr) = try await run(["sse", "https://localhost:\(server.port)/events"])
        #expect(status == 1)
        #expect(stderr.contains("certificate not trusted"), "\(stderr)")
        #expect(!stderr.contains(".cc:") && !stderr.contains("/checkouts/"), "\(stderr)")
    }

    @Test func sseStatsAsJSON() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/events") { _ in .init(headers: sseHeaders, body: .bytes(ByteBuffer(string: "data: one\n\n"))) }
        let result = try await RealtimeCommandLine.run(["sse", server.baseURL + "/events", "--count", "1", "--quiet", "--stats", "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        let stats = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
        #expect(stats?["events"] as? Int == 1, "\(result.stdout)")
        #expect(stats?["bytes"] as? Int == "data: one\n\n".utf8.count, "\(result.stdout)")
        // The rate is the events over the elapsed time (both printed, rounded to 3 and 2 places); how
        // long the run took depends on the machine's load, so the check is the arithmetic, not a speed.
        let seconds = try #require(stats?["seconds"] as? Double, "\(result.stdout)")
        let rate = try #require(stats?["eventsPerSecond"] as? Double, "\(result.stdout)")
        #expect(seconds > 0, "\(result.stdout)")
        #expect(abs(rate - 1 / seconds) <= 0.01 + 0.001 / (seconds * seconds), "\(result.stdout)")
    }

    @Test func sseReportsABadStatusAndExitsNonZero() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let (status, stderr) = try await run(["sse", server.baseURL + "/missing"])
        #expect(status == 1)
        #expect(stderr.contains("failed for good"), "\(stderr)")
        #expect(stderr.contains("HTTP 404"), "\(stderr)")
    }

    @Test func sseStatsAndQuiet() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let body = (1...5).map { "id: \($0)\ndata: event \($0)\n\n" }.joined()
        server.route("/events") { _ in .init(headers: sseHeaders, body: .bytes(ByteBuffer(string: body))) }
        let result = try await RealtimeCommandLine.run(["sse", server.baseURL + "/events", "--count", "5", "--quiet", "--stats"])
        #expect(result.status == 0, "\(result.stderr)")
        let words = result.stdout.split(separator: " ")
        #expect(result.stdout.hasPrefix("5 events, \(body.utf8.count) bytes, "), "\(result.stdout)")
        #expect(words.count == 8 && result.stdout.hasSuffix("events/s\n"), "\(result.stdout)")
    }

    /// `-h` is `--help` in every subcommand (`-H` is the header), and the tool has a version.
    @Test func helpVersionAndUsageErrors() async throws {
        for command in ["ws", "sse", "socketio", "signalr", "spreadbot"] {
            let help = try await RealtimeCommandLine.run([command, "-h"])
            #expect(help.status == 0, "\(command): \(help.stderr)")
            #expect(help.stdout.contains("USAGE"), "\(command)")
            #expect(help.stdout.contains("-H, --header"), "\(command)")
            #expect(help.stdout.contains("--cacert"), "\(command)")
        }
        let top = try await RealtimeCommandLine.run(["--help"])
        #expect(top.stdout.contains("spreadbot"))
        #expect(top.stdout.contains("Exit codes"))
        let version = try await RealtimeCommandLine.run(["--version"])
        #expect(version.status == 0)
        #expect(version.stdout.hasPrefix("swift-realtime "))
        let usage = try await RealtimeCommandLine.run(["sse"])
        #expect(usage.status == 64, "a missing argument is a usage error")
    }

    /// --cacert trusts a private CA's PEM file (the library's TLSOptions) instead of turning checks off.
    @Test func sseTrustsACACertificateFile() async throws {
        let certificates = try await TestCertificates.make()
        defer { certificates.remove() }
        let tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMFile(certificates.server.certificatePath).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: certificates.server.keyPath, format: .pem)))
        let server = try await ScriptedHTTPServer.start(tls: tls)
        defer { Task { await server.stop() } }
        server.route("/events") { _ in .init(headers: sseHeaders, body: .bytes(ByteBuffer(string: "data: secure\n\n"))) }
        let url = "https://localhost:\(server.port)/events"
        let refused = try await RealtimeCommandLine.run(["sse", url, "--count", "1", "--reconnect-attempts", "0"])
        #expect(refused.status == 1, "the private CA is not trusted by default")
        let trusted = try await RealtimeCommandLine.run(["sse", url, "--count", "1", "--cacert", certificates.ca.certificatePath])
        #expect(trusted.status == 0, "\(trusted.stderr)")
        #expect(trusted.stdout == "[message] id= secure\n")
    }

    /// A server mounted under a prefix is reachable with --path.
    @Test func socketioWithAPath() async throws {
        var options = SocketIOTestServer.Options()
        options.path = "/prefix/socket.io/"
        let server = try await SocketIOTestServer.start(options: options)
        defer { Task { await server.stop() } }
        let result = try await RealtimeCommandLine.run([
            "socketio", server.url, "--path", "/prefix/socket.io/", "--emit", "echo", "[\"hi\"]", "--ack", "--json",
        ])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("{\"ack\":[\"hi\"]}"), "\(result.stdout)")
    }
}
