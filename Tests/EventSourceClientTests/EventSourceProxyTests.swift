import EventSourceClient
import Foundation
import NIOCore
import NIOSSL
import RealtimeCore
import RealtimeTesting
import Testing

/// SSE streams through real proxies (tinyproxy with and without credentials, dante's SOCKS5), over
/// http and https, each asserted from the proxy's log; and the `realtime sse` command through a
/// proxy given by `--proxy` and by the environment, with `--noproxy`.
@Suite(.serialized, .timeLimit(.minutes(2))) final class EventSourceProxyTests {
    let certificates: TestCertificates

    init() async throws {
        certificates = try await TestCertificates.make()
    }

    deinit { certificates.remove() }

    func secureServer() async throws -> ScriptedHTTPServer {
        let tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMFile(certificates.server.certificatePath).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: certificates.server.keyPath, format: .pem)))
        return try await ScriptedHTTPServer.start(tls: tls)
    }

    @Test(arguments: [ProxyProcess.Kind.tinyproxy(), .tinyproxy(username: "sse", password: "pw"), .dante])
    func streamsGoThroughARealProxy(_ kind: ProxyProcess.Kind) async throws {
        let proxy = try await ProxyProcess.start(kind)
        defer { Task { await proxy.stop() } }
        let plain = try await ScriptedHTTPServer.start()
        defer { Task { await plain.stop() } }
        let secure = try await secureServer()
        defer { Task { await secure.stop() } }
        for server in [plain, secure] {
            server.route("/events") { _ in .init(headers: sseHeaders, body: .bytes(ByteBuffer(string: "id: 1\ndata: one\n\nid: 2\ndata: two\n\n"))) }
        }
        var runtime = RealtimeRuntime()
        runtime.proxy = proxy.configuration
        for (server, tls) in [(plain, TLSOptions.default), (secure, TLSOptions(trustRoots: .pemFile(certificates.ca.certificatePath)))] {
            let source = EventSource(
                url: URL(string: server.baseURL + "/events")!, configuration: fastConfiguration { $0.tls = tls }, runtime: runtime)
            let events = try await collect(source, count: 2)
            source.close()
            #expect(events.map(\.data) == ["one", "two"])
            try await proxy.waitForTarget(port: server.port)
        }
    }

    /// close() while tinyproxy's answer to CONNECT is held back in the network: the stream's own
    /// connection closes at once (nothing waits for the tunnel), and no request reaches the server
    /// once the network is back.
    @Test func closeWhileTheProxyTunnelIsBeingSetUp() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/events") { _ in .init(headers: sseHeaders, body: .bytes(ByteBuffer(string: "data: late\n\n"))) }
        let proxy = try await ProxyProcess.start(.tinyproxy())
        defer { Task { await proxy.stop() } }
        let network = try await FaultProxy.start(targetPort: proxy.port)
        defer { Task { await network.stop() } }
        network.inject(.stall(.both, for: nil))
        var runtime = RealtimeRuntime()
        runtime.proxy = .http(host: "127.0.0.1", port: network.port)
        let source = EventSource(url: URL(string: server.baseURL + "/events")!, configuration: fastConfiguration(), runtime: runtime)
        let running = Task { try await source.run() }
        try await network.waitForConnections(1)
        source.close()
        try await running.value
        try await waitUntil("the stream's connection to the proxy was closed") { network.statistics.connectionsOpen == 0 }
        network.resume()
        #expect(network.statistics.connectionsAccepted == 1)
        #expect(server.requests.isEmpty, "no request reached the server: \(server.requests.map(\.path))")
        #expect(source.readyState == .closed)
    }

    @Test func theCommandGoesThroughAProxyFromItsFlagOrTheEnvironment() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/events") { _ in .init(headers: sseHeaders, body: .bytes(ByteBuffer(string: "data: proxied\n\n"))) }
        let proxy = try await ProxyProcess.start(.tinyproxy(username: "cli", password: "secret"))
        defer { Task { await proxy.stop() } }
        let url = server.baseURL + "/events"

        let flagged = try await RealtimeCommandLine.run(["sse", url, "--count", "1", "--proxy", proxy.url])
        #expect(flagged.status == 0, "\(flagged.stderr)")
        #expect(flagged.stdout == "[message] id= proxied\n")
        try await proxy.waitForTarget(port: server.port)
        let requestsThroughProxy = proxy.log.components(separatedBy: "GET http://127.0.0.1:\(server.port)/events").count - 1
        #expect(requestsThroughProxy == 1, "\(proxy.log)")

        let fromEnvironment = try await RealtimeCommandLine.run(["sse", url, "--count", "1"], environment: ["http_proxy": proxy.url])
        #expect(fromEnvironment.status == 0, "\(fromEnvironment.stderr)")
        try await waitUntil("the second request in the proxy's log") {
            proxy.log.components(separatedBy: "GET http://127.0.0.1:\(server.port)/events").count - 1 == 2
        }

        let bypassed = try await RealtimeCommandLine.run(
            ["sse", url, "--count", "1", "--noproxy", "localhost,127.0.0.1"], environment: ["http_proxy": proxy.url])
        #expect(bypassed.status == 0, "\(bypassed.stderr)")
        #expect(server.requests(to: "/events").count == 3)
        #expect(proxy.log.components(separatedBy: "GET http://127.0.0.1:\(server.port)/events").count - 1 == 2, "the third went direct")

        // Wrong credentials: the proxy refuses, the command says so without printing them. The
        // request is absolute-form (plain http through the proxy, as curl sends it), and tinyproxy
        // answers wrong credentials there with 401 (a missing one with 407), which reaches the
        // client as the response, as curl shows it.
        let refused = try await RealtimeCommandLine.run(
            ["sse", url, "--count", "1", "--reconnect-attempts", "0", "--proxy", "http://cli:wrong-pw@127.0.0.1:\(proxy.port)"])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("HTTP 401"), "\(refused.stderr)")
        #expect(!refused.stderr.contains("wrong-pw"), "\(refused.stderr)")

        let invalid = try await RealtimeCommandLine.run(["sse", url, "--proxy", "ftp://proxy:21"])
        #expect(invalid.status == 64, "an unusable proxy URL is a usage error: \(invalid.stderr)")
    }
}
