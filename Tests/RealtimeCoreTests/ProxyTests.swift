import AsyncHTTPClient
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOSSL
@testable import RealtimeCore
import RealtimeTesting
import Foundation
import Testing

/// WebSocket and HTTP connections through real proxies (tinyproxy, with and without Basic
/// credentials, and dante's SOCKS5 server), each asserted from the proxy's own log, and through
/// `FaultProxy` as a `CONNECT` proxy for its failures: a 407, a refusal, a close before the answer,
/// silence, a cut once the tunnel is open, a proxy that is not there.
@Suite(.serialized, .timeLimit(.minutes(3))) final class ProxyTests {
    let certificates: TestCertificates

    init() async throws {
        certificates = try await TestCertificates.make()
    }

    deinit { certificates.remove() }

    static let realProxies: [ProxyProcess.Kind] = [.tinyproxy(), .tinyproxy(username: "alice", password: "p4ss-w0rd"), .dante]

    func serverTLS() throws -> TLSConfiguration {
        TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMFile(certificates.server.certificatePath).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: certificates.server.keyPath, format: .pem)))
    }

    /// TLS to the server inside the tunnel, with a private CA and a pinned key.
    func pinnedTLS() throws -> TLSOptions {
        let pin = try TLSPinning.spkiSHA256(of: try #require(try NIOSSLCertificate.fromPEMFile(certificates.server.certificatePath).first))
        return TLSOptions(trustRoots: .pemFile(certificates.ca.certificatePath), pinnedPublicKeySHA256: [pin])
    }

    func runtime(_ proxy: ProxyConfiguration) -> RealtimeRuntime {
        var runtime = RealtimeRuntime()
        runtime.proxy = proxy
        return runtime
    }

    func echo(_ url: String, tls: TLSOptions = .default, runtime: RealtimeRuntime, connectTimeout: Duration = .seconds(10)) async throws -> String? {
        let reply = NIOLockedValueBox<String?>(nil)
        try await WebSocketTransport.connect(
            to: url, configuration: WebSocketConfiguration(connectTimeout: connectTimeout, tls: tls), runtime: runtime
        ) { connection in
            try await connection.send(text: "through the proxy")
            var iterator = connection.inbound.makeAsyncIterator()
            if case .text(let text) = try await iterator.next() { reply.withLockedValue { $0 = text } }
            try await connection.close()
        }
        return reply.withLockedValue { $0 }
    }

    @Test(arguments: realProxies) func webSocketsGoThroughARealProxy(_ kind: ProxyProcess.Kind) async throws {
        let proxy = try await ProxyProcess.start(kind)
        defer { Task { await proxy.stop() } }
        let plain = try await WebSocketEchoServer.start()
        defer { Task { await plain.stop() } }
        let secure = try await WebSocketEchoServer.start(tls: try serverTLS())
        defer { Task { await secure.stop() } }
        let runtime = runtime(proxy.configuration)

        #expect(try await echo(plain.webSocketBaseURL, runtime: runtime) == "through the proxy")
        try await proxy.waitForTarget(port: plain.port)
        #expect(try await echo(secure.webSocketBaseURL, tls: try pinnedTLS(), runtime: runtime) == "through the proxy")
        try await proxy.waitForTarget(port: secure.port)
    }

    @Test(arguments: realProxies) func httpRequestsGoThroughARealProxy(_ kind: ProxyProcess.Kind) async throws {
        let proxy = try await ProxyProcess.start(kind)
        defer { Task { await proxy.stop() } }
        let plain = try await ScriptedHTTPServer.start()
        defer { Task { await plain.stop() } }
        let secure = try await ScriptedHTTPServer.start(tls: try serverTLS())
        defer { Task { await secure.stop() } }
        for server in [plain, secure] {
            server.route("/hello") { request in .text("hi \(request.method)") }
        }
        let runtime = runtime(proxy.configuration)

        // Plain http: absolute-form through tinyproxy (as curl sends it), a tunnel through SOCKS5.
        let (head, body) = try await HTTPTransport.execute(HTTPRequestSpec(url: plain.baseURL + "/hello"), runtime: runtime)
        #expect(head.status == .ok)
        #expect(String(buffer: body) == "hi GET")
        try await proxy.waitForTarget(port: plain.port)
        // https: a tunnel, TLS inside it with the private CA and the pin.
        let (secureHead, secureBody) = try await HTTPTransport.execute(
            HTTPRequestSpec(url: secure.baseURL + "/hello", method: .POST, body: ByteBuffer(string: "x"), tls: try pinnedTLS()),
            runtime: runtime)
        #expect(secureHead.status == .ok)
        #expect(String(buffer: secureBody) == "hi POST")
        try await proxy.waitForTarget(port: secure.port)
        #expect(plain.requests(to: "/hello").count == 1)
        #expect(secure.requests(to: "/hello").count == 1)
    }

    @Test func credentialsAreSentAsBasicAndNeverPrinted() async throws {
        let server = try await WebSocketEchoServer.start()
        defer { Task { await server.stop() } }
        let proxy = try await FaultProxy.start(targetPort: server.port, connectFront: .init(username: "alice", password: "s3cret"))
        defer { Task { await proxy.stop() } }

        let good = ProxyConfiguration.http(host: "127.0.0.1", port: proxy.port, username: "alice", password: "s3cret")
        #expect(try await echo(server.webSocketBaseURL, runtime: runtime(good)) == "through the proxy")
        #expect(proxy.connectRequests.first?.authority == "127.0.0.1:\(server.port)")
        #expect(proxy.connectRequests.first?.proxyAuthorization == "Basic YWxpY2U6czNjcmV0")
        #expect(proxy.connectRequests.first?.status == 200)

        for (configuration, why) in [
            (ProxyConfiguration.http(host: "127.0.0.1", port: proxy.port), "proxy authentication required"),
            (try ProxyConfiguration.url("http://alice:wrong-s3cret@127.0.0.1:\(proxy.port)"), "did not accept the credentials"),
        ] {
            let error = await #expect(throws: RealtimeError.self) { _ = try await self.echo(server.webSocketBaseURL, runtime: self.runtime(configuration)) }
            #expect(error?.code == .proxyFailed)
            #expect(error?.status == .proxyAuthenticationRequired)
            let text = error.map { "\($0)" } ?? ""
            #expect(text.contains("http://127.0.0.1:\(proxy.port)") && text.contains(why), "\(text)")
            #expect(!text.contains("s3cret") && !text.contains("alice"), "\(text)")
        }
        // The HTTP transport (async-http-client's tunnel) says the same.
        let error = await #expect(throws: RealtimeError.self) {
            _ = try await HTTPTransport.execute(
                HTTPRequestSpec(url: "https://127.0.0.1:\(server.port)/"), runtime: self.runtime(.http(host: "127.0.0.1", port: proxy.port)))
        }
        #expect(error?.code == .proxyFailed)
        #expect(error?.status == .proxyAuthenticationRequired)
        #expect(error.map { "\($0)" }?.contains("http://127.0.0.1:\(proxy.port)") == true)
    }

    @Test func aRefusedTunnelIsAProxyFailureWithItsStatus() async throws {
        let server = try await WebSocketEchoServer.start()
        defer { Task { await server.stop() } }
        let proxy = try await FaultProxy.start(targetPort: server.port, connectFront: .init(answer: .refuse(status: 403)))
        defer { Task { await proxy.stop() } }
        let runtime = runtime(.http(host: "127.0.0.1", port: proxy.port))

        let error = await #expect(throws: RealtimeError.self) { _ = try await self.echo(server.webSocketBaseURL, runtime: runtime) }
        #expect(error?.code == .proxyFailed)
        #expect(error?.status == .forbidden)
        let httpError = await #expect(throws: RealtimeError.self) {
            _ = try await HTTPTransport.execute(HTTPRequestSpec(url: "https://127.0.0.1:\(server.port)/"), runtime: runtime)
        }
        #expect(httpError?.code == .proxyFailed)

        proxy.answerConnect(.refuse(status: 502))
        let badGateway = await #expect(throws: RealtimeError.self) { _ = try await self.echo(server.webSocketBaseURL, runtime: runtime) }
        #expect(badGateway?.status == .badGateway)
        #expect(proxy.connectRequests.map(\.status) == [403, 403, 502])
    }

    @Test func aProxyThatClosesOrStaysSilentFailsTheConnection() async throws {
        let server = try await WebSocketEchoServer.start()
        defer { Task { await server.stop() } }
        let proxy = try await FaultProxy.start(targetPort: server.port, connectFront: .init(answer: .close))
        defer { Task { await proxy.stop() } }
        let runtime = runtime(.http(host: "127.0.0.1", port: proxy.port))

        let closed = await #expect(throws: RealtimeError.self) { _ = try await self.echo(server.webSocketBaseURL, runtime: runtime) }
        #expect(closed?.code == .proxyFailed)
        #expect(closed?.detail.contains("closed the connection before opening the tunnel") == true, "\(String(describing: closed))")

        proxy.answerConnect(.stall)
        // 2 s: on a loaded machine (a clean clone's first full run) 500 ms once passed before the
        // CONNECT was recorded by the proxy.
        let silent = await #expect(throws: RealtimeError.self) {
            _ = try await self.echo(server.webSocketBaseURL, runtime: runtime, connectTimeout: .seconds(2))
        }
        #expect(silent?.code == .timeout)
        #expect(silent?.detail.contains("through the proxy http://127.0.0.1:\(proxy.port)") == true, "\(String(describing: silent))")
        try await waitUntil("the proxy recorded the second CONNECT") { proxy.connectRequests.count == 2 }
    }

    @Test func aTunnelCutOnceOpenIsALostConnection() async throws {
        let server = try await WebSocketEchoServer.start()
        defer { Task { await server.stop() } }
        let proxy = try await FaultProxy.start(targetPort: server.port, connectFront: .init())
        defer { Task { await proxy.stop() } }
        let opened = Recorder<Bool>()
        let error = await #expect(throws: RealtimeError.self) {
            try await WebSocketTransport.connect(to: server.webSocketBaseURL, runtime: self.runtime(.http(host: "127.0.0.1", port: proxy.port))) { connection in
                try await connection.send(text: "one")
                var iterator = connection.inbound.makeAsyncIterator()
                _ = try await iterator.next()
                opened.append(true)
                proxy.cutAll(.reset)
                while try await iterator.next() != nil {}
            }
        }
        #expect(opened.values == [true])
        #expect(error?.code == .connectionClosed, "\(String(describing: error))")
    }

    @Test func aProxyThatIsNotThereIsNamed() async throws {
        let refusing = try RefusingPort()
        defer { refusing.release() }
        let runtime = runtime(.http(host: "127.0.0.1", port: refusing.port, username: "u", password: "secret-pw"))
        let error = await #expect(throws: RealtimeError.self) { _ = try await self.echo("ws://127.0.0.1:9/", runtime: runtime) }
        #expect(error?.code == .connectFailed)
        #expect(error?.detail.contains("the proxy http://127.0.0.1:\(refusing.port)") == true, "\(String(describing: error))")
        let httpError = await #expect(throws: RealtimeError.self) {
            _ = try await HTTPTransport.execute(HTTPRequestSpec(url: "http://127.0.0.1:9/"), runtime: runtime)
        }
        #expect(httpError?.code == .connectFailed)
        #expect(httpError?.detail.contains("the proxy http://127.0.0.1:\(refusing.port)") == true, "\(String(describing: httpError))")
        #expect(!"\(String(describing: error)) \(String(describing: httpError))".contains("secret-pw"))
    }

    /// `no_proxy` from the environment (curl's rules): a listed host goes direct, another through
    /// the proxy; `https_proxy` serves wss and https, `http_proxy` ws and http.
    @Test func theEnvironmentChoosesTheProxyAndNoProxyBypassesIt() async throws {
        let server = try await WebSocketEchoServer.start()
        defer { Task { await server.stop() } }
        let proxy = try await FaultProxy.start(targetPort: server.port, connectFront: .init())
        defer { Task { await proxy.stop() } }

        let bypassed = ProxyConfiguration.environment(["http_proxy": proxy.url(), "NO_PROXY": "example.com, 127.0.0.0/8"])
        #expect(try await echo(server.webSocketBaseURL, runtime: runtime(bypassed)) == "through the proxy")
        #expect(proxy.connectRequests.isEmpty)
        #expect(proxy.statistics.connectionsAccepted == 0)

        let proxied = ProxyConfiguration.environment(["http_proxy": proxy.url(), "no_proxy": "example.com"])
        #expect(try await echo(server.webSocketBaseURL, runtime: runtime(proxied)) == "through the proxy")
        #expect(proxy.connectRequests.map(\.authority) == ["127.0.0.1:\(server.port)"])

        // Only https_proxy set: a ws:// connection goes direct.
        let secureOnly = ProxyConfiguration.environment(["https_proxy": proxy.url()])
        #expect(try await echo(server.webSocketBaseURL, runtime: runtime(secureOnly)) == "through the proxy")
        #expect(proxy.connectRequests.count == 1)

        // --noproxy, which replaces the environment's list.
        var cli = ProxyConfiguration.environment(["all_proxy": proxy.url()])
        cli.noProxy = ["127.0.0.1"]
        #expect(try await echo(server.webSocketBaseURL, runtime: runtime(cli)) == "through the proxy")
        #expect(proxy.connectRequests.count == 1)
    }

    /// An app's own HTTP client gets each request's TLS options (a private CA) and keeps its own
    /// proxy; a pinned request goes through the runtime's clients and the runtime's proxy.
    @Test func anAppsHTTPClientGetsTheTLSOptions() async throws {
        let secure = try await ScriptedHTTPServer.start(tls: try serverTLS())
        defer { Task { await secure.stop() } }
        secure.route("/hello") { _ in .text("hi") }
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool.retryConnectionEstablishment = false
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        defer { Task { try? await client.shutdown() } }
        var runtime = RealtimeRuntime(httpClient: client)
        runtime.proxy = .none
        let ca = TLSOptions(trustRoots: .pemFile(certificates.ca.certificatePath))
        let (head, body) = try await HTTPTransport.execute(HTTPRequestSpec(url: secure.baseURL + "/hello", tls: ca), runtime: runtime)
        #expect(head.status == .ok)
        #expect(String(buffer: body) == "hi")
        let error = await #expect(throws: RealtimeError.self) {
            _ = try await HTTPTransport.execute(HTTPRequestSpec(url: secure.baseURL + "/hello"), runtime: runtime)
        }
        #expect(error?.code == .tlsFailure, "without the private CA the system roots refuse the certificate")

        let proxy = try await FaultProxy.start(targetPort: secure.port, connectFront: .init())
        defer { Task { await proxy.stop() } }
        runtime.proxy = .http(host: "127.0.0.1", port: proxy.port)
        _ = try await HTTPTransport.execute(HTTPRequestSpec(url: secure.baseURL + "/hello", tls: ca), runtime: runtime)
        #expect(proxy.connectRequests.isEmpty, "the app's client keeps its own (no) proxy")
        _ = try await HTTPTransport.execute(HTTPRequestSpec(url: secure.baseURL + "/hello", tls: try pinnedTLS()), runtime: runtime)
        #expect(proxy.connectRequests.count == 1, "a pinned request uses the runtime's clients and proxy")
    }
}

/// The proxy settings as values: URLs, the environment, curl's `no_proxy` rules.
@Suite struct ProxyConfigurationTests {
    @Test func proxyURLsParseAsCurlTakesThem() throws {
        let plain = try #require(try ProxyServer(url: "proxy.example:3128"))
        #expect(plain == ProxyServer(kind: .http, host: "proxy.example", port: 3128))
        #expect(try ProxyServer(url: "http://proxy.example")?.port == 1080)
        let withCredentials = try #require(try ProxyServer(url: "http://al%40ice:p%3Ass@[::1]:8080"))
        #expect(withCredentials.host == "::1")
        #expect(withCredentials.username == "al@ice")
        #expect(withCredentials.password == "p:ss")
        #expect(withCredentials.description == "http://[::1]:8080")
        #expect(withCredentials.basicAuthorization == "Basic " + Data("al@ice:p:ss".utf8).base64EncodedString())
        #expect(try ProxyServer(url: "socks5h://127.0.0.1:1080")?.kind == .socks5)
        #expect(try ProxyServer(url: "socks5://127.0.0.1")?.kind == .socks5)
        #expect(try ProxyServer(url: "  ") == nil)
        #expect(try ProxyConfiguration.url("") == .none)
        for unusable in ["https://proxy:443", "socks4://proxy:1080", "socks5://user:pw@proxy:1080", "http://:80"] {
            let error = #expect(throws: RealtimeError.self) { try ProxyServer(url: unusable) }
            #expect(error?.code == .invalidURL)
            #expect(error.map { "\($0)" }?.contains("pw") != true)
        }
    }

    @Test func theEnvironmentPicksBySchemeLowerCaseFirst() throws {
        let environment = ProxyConfiguration.environment([
            "HTTPS_PROXY": "http://upper:1", "https_proxy": "http://lower:2", "HTTP_PROXY": "http://plain:3", "ALL_PROXY": "socks5://all:4",
        ])
        #expect(try environment.server(forScheme: "wss", host: "a.example")?.host == "lower")
        #expect(try environment.server(forScheme: "https", host: "a.example")?.host == "lower")
        // HTTP_PROXY is ignored, as curl ignores it (httpoxy): ws and http fall back to ALL_PROXY.
        #expect(try environment.server(forScheme: "ws", host: "a.example")?.host == "all")
        #expect(try environment.server(forScheme: "http", host: "a.example")?.host == "all")
        #expect(try ProxyConfiguration.environment(["HTTP_PROXY": "http://plain:3"]).server(forScheme: "http", host: "a.example") == nil)
        #expect(try ProxyConfiguration.environment(["http_proxy": "http://plain:3"]).server(forScheme: "http", host: "a.example")?.host == "plain")
        let allOnly = ProxyConfiguration.environment(["all_proxy": "socks5://all:4"])
        #expect(try allOnly.server(forScheme: "wss", host: "a.example") == ProxyServer(kind: .socks5, host: "all", port: 4))
        #expect(try ProxyConfiguration.environment([:]).server(forScheme: "wss", host: "a.example") == nil)
        #expect(try ProxyConfiguration.none.server(forScheme: "wss", host: "a.example") == nil)
        let broken = ProxyConfiguration.environment(["https_proxy": "ftp://proxy:21"])
        let error = #expect(throws: RealtimeError.self) { try broken.server(forScheme: "https", host: "a.example") }
        #expect(error?.detail.contains("https_proxy") == true)
    }

    /// curl's `no_proxy`: a name matches itself and its subdomains, a leading dot is ignored, IP
    /// addresses and CIDR ranges match IP literals only, `*` matches everything.
    @Test(arguments: [
        ("example.com", "example.com", true),
        ("example.com", "api.example.com", true),
        ("example.com", "notexample.com", false),
        (".example.com", "example.com", true),
        (".example.com", "a.b.example.com", true),
        ("example.com", "example.com.", true),
        ("EXAMPLE.com", "Api.Example.COM", true),
        ("localhost,127.0.0.1", "127.0.0.1", true),
        ("localhost 127.0.0.1", "localhost", true),
        ("10.0.0.0/8", "10.20.30.40", true),
        ("10.0.0.0/8", "11.0.0.1", false),
        ("192.168.1.0/25", "192.168.1.127", true),
        ("192.168.1.0/25", "192.168.1.128", false),
        ("::1", "[::1]", true),
        ("fd00::/8", "fd12::1", true),
        ("10.0.0.0/8", "ten.example", false),
        ("*", "anything.example", true),
        ("*.example.com", "a.example.com", false),
        ("", "example.com", false),
        // curl 7.88's details: `*` only alone; one dot stripped; IP hosts never by a name's tail;
        // the bits of a range read as atoi reads them.
        (" *", "anything.example", false),
        ("*,other.example", "anything.example", false),
        ("..example.com", "example.com", false),
        ("example.com..", "example.com", false),
        ("example.com.", "example.com", true),
        ("example.com", "example.com..", false),
        ("0.0.1", "127.0.0.1", false),
        ("1.2.3.4/0", "127.0.0.1", false),
        ("127.0.0.1/0", "127.0.0.1", true),
        ("127.0.0.1/33", "127.0.0.1", false),
        ("127.0.0.0/8x", "127.0.0.1", true),
        ("localhost", "127.0.0.1", false),
    ])
    func noProxyFollowsCurl(_ list: String, _ host: String, _ bypass: Bool) {
        #expect(NoProxyRules.matches(host: host, entries: NoProxyRules.entries(list)) == bypass)
    }

    /// ``ProxyConfiguration/noProxy`` replaces the environment's `no_proxy`, as curl's `--noproxy` does.
    @Test func noProxyReplacesTheEnvironmentsList() throws {
        var configuration = ProxyConfiguration.environment(["http_proxy": "http://proxy:3128", "no_proxy": "127.0.0.1"])
        #expect(try configuration.server(forScheme: "http", host: "127.0.0.1") == nil)
        configuration.noProxy = ["example.com"]
        #expect(try configuration.server(forScheme: "http", host: "127.0.0.1")?.host == "proxy")
        #expect(try configuration.server(forScheme: "http", host: "api.example.com") == nil)
        #expect(try ProxyConfiguration.environment(["http_proxy": "http://proxy:3128", "no_proxy": "", "NO_PROXY": "*"])
            .server(forScheme: "http", host: "a.example") == nil)
    }
}
