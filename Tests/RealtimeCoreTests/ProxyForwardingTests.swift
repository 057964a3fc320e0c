import Foundation
import NIOCore
import NIOHTTP1
import NIOSSL
@testable import RealtimeCore
import RealtimeTesting
import Testing

/// HTTP proxies as curl uses them: plain `http://` requests go to the proxy in absolute-form (no
/// `CONNECT`), so squid with Debian's stock rules (`CONNECT` to port 443 only) passes them and
/// refuses every tunnel to another port with a 403 that keeps its status; a 407 says whether
/// credentials were missing or wrong; a proxy that is not listening is a failed connect, never an
/// "abandoned" tunnel.
@Suite(.serialized, .timeLimit(.minutes(3))) final class ProxyForwardingTests {
    let certificates: TestCertificates

    init() async throws {
        certificates = try await TestCertificates.make()
    }

    deinit { certificates.remove() }

    func runtime(_ proxy: ProxyConfiguration) -> RealtimeRuntime {
        var runtime = RealtimeRuntime()
        runtime.proxy = proxy
        return runtime
    }

    var caTLS: TLSOptions { TLSOptions(trustRoots: .pemFile(certificates.ca.certificatePath)) }

    /// Opens an event stream on `url` and returns the data of its first event (after `publish`).
    func firstEvent(_ url: String, tls: TLSOptions = .default, runtime: RealtimeRuntime, publish: @escaping @Sendable () -> Void) async throws -> String? {
        let received = Recorder<String>()
        let stream = try EventStream.open(
            HTTPRequestSpec(url: url, headers: ["Accept": "text/event-stream"], tls: tls, headTimeout: .seconds(10)), runtime: runtime,
            onHead: { head in
                head.status == .ok ? .accept : .refuse { _ in RealtimeError(.badStatus, "status \(head.status.code)", status: head.status) }
            },
            onOutputs: { outputs in
                for case .event(let event) in outputs { received.append(event.data) }
                return true
            })
        defer { stream.cancel() }
        try await stream.accepted()
        publish()
        try await waitUntil("the first event") { !received.values.isEmpty }
        return received.values.first
    }

    @Test func plainHTTPIsSentInAbsoluteForm() throws {
        let target = try Endpoint("http://127.0.0.1:8080/a/b?x=1", allowedSchemes: ["http"])
        let bytes = try HTTPStreamRequest(
            method: .GET, target: target, headers: ["Accept": "*/*", "Proxy-Authorization": "the caller's"], body: nil,
            form: .absolute(proxyAuthorization: "Basic YTpi")
        ).encoded()
        let text = String(buffer: bytes)
        #expect(text.hasPrefix("GET http://127.0.0.1:8080/a/b?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nProxy-Authorization: Basic YTpi\r\n"), "\(text)")
        #expect(!text.contains("the caller's"))
        let defaultPort = try Endpoint("http://[::1]/", allowedSchemes: ["http"])
        let line = String(buffer: try HTTPStreamRequest(method: .POST, target: defaultPort, headers: [:], body: nil, form: .absolute(proxyAuthorization: nil)).encoded())
        #expect(line.hasPrefix("POST http://[::1]/ HTTP/1.1\r\nHost: [::1]\r\nContent-Length: 0\r\n"), "\(line)")
        let origin = String(buffer: try HTTPStreamRequest(method: .GET, target: target, headers: [:], body: nil).encoded())
        #expect(origin.hasPrefix("GET /a/b?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"), "\(origin)")
    }

    /// Squid's stock rules pass plain-http requests (absolute-form) to a high port: an event
    /// stream, whole requests (with a redirect and a cookie) and a streamed one, each in its log.
    @Test func plainHTTPGoesThroughSquidsStockRules() async throws {
        let squid = try await ProxyProcess.start(.squid)
        defer { Task { await squid.stop() } }
        let sse = try await SSETestServer.start()
        defer { Task { await sse.stop() } }
        let runtime = runtime(squid.configuration)

        #expect(try await firstEvent(sse.url, runtime: runtime) { _ = sse.publish("through squid") } == "through squid")
        try await squid.waitForTarget(port: sse.port)
        #expect(squid.log.contains("GET http://127.0.0.1:\(sse.port)/events"), "\(squid.log)")

        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/hello") { request in
            .init(status: 200, headers: [("Set-Cookie", "seen=yes; Path=/")], body: .bytes(ByteBuffer(string: "hi \(request.method) \(request.headers["cookie"] ?? "-")")))
        }
        server.route("/moved") { _ in .init(status: 302, headers: [("Location", "/hello")]) }
        let cookies = CookieStore()
        let (head, body) = try await HTTPTransport.execute(HTTPRequestSpec(url: server.baseURL + "/moved", cookies: cookies), runtime: runtime)
        #expect(head.status == .ok)
        #expect(head.url == server.baseURL + "/hello")
        #expect(String(buffer: body) == "hi GET -")
        let (_, posted) = try await HTTPTransport.execute(
            HTTPRequestSpec(url: server.baseURL + "/hello", method: .POST, body: ByteBuffer(string: "x"), cookies: cookies), runtime: runtime)
        #expect(String(buffer: posted) == "hi POST seen=yes")
        let streamed = try await HTTPTransport.stream(HTTPRequestSpec(url: server.baseURL + "/hello", idleTimeout: .seconds(10)), runtime: runtime) { head, chunks in
            var text = ""
            for try await chunk in chunks { text += String(buffer: chunk) }
            return "\(head.status.code) \(text)"
        }
        #expect(streamed == "200 hi GET -")
        let tooLarge = await #expect(throws: RealtimeError.self) {
            var request = HTTPRequestSpec(url: server.baseURL + "/hello")
            request.maxBodySize = 3
            _ = try await HTTPTransport.execute(request, runtime: runtime)
        }
        #expect(tooLarge?.code == .messageTooLarge)
        try await waitUntil("squid logging the requests") {
            squid.log.contains("POST http://127.0.0.1:\(server.port)/hello") && squid.log.contains("GET http://127.0.0.1:\(server.port)/moved")
        }
        #expect(!squid.log.contains("CONNECT"), "\(squid.log)")
    }

    /// A tunnel to a port other than 443 is refused by squid's stock rules: a WebSocket (`ws://`
    /// needs a tunnel), an https request and an https event stream each fail with its 403.
    @Test func tunnelsThroughSquidAreRefusedWithItsStatus() async throws {
        let squid = try await ProxyProcess.start(.squid)
        defer { Task { await squid.stop() } }
        let echo = try await WebSocketEchoServer.start()
        defer { Task { await echo.stop() } }
        let secure = try await ScriptedHTTPServer.start(tls: try certificates.server.serverConfiguration())
        defer { Task { await secure.stop() } }
        secure.route("/events") { _ in .text("never") }
        let runtime = runtime(squid.configuration)

        let webSocket = await #expect(throws: RealtimeError.self) {
            try await WebSocketTransport.connect(to: echo.webSocketBaseURL, runtime: runtime) { _ in }
        }
        let request = await #expect(throws: RealtimeError.self) {
            _ = try await HTTPTransport.execute(HTTPRequestSpec(url: secure.baseURL + "/events", tls: self.caTLS), runtime: runtime)
        }
        let stream = await #expect(throws: RealtimeError.self) {
            _ = try await self.firstEvent(secure.baseURL + "/events", tls: self.caTLS, runtime: runtime) {}
        }
        for error in [webSocket, request, stream] {
            #expect(error?.code == .proxyFailed, "\(String(describing: error))")
            #expect(error?.status == .forbidden, "\(String(describing: error))")
            #expect(error?.detail.contains("403") == true, "\(String(describing: error))")
        }
        try await waitUntil("squid logging the refused tunnels") {
            squid.log.components(separatedBy: "TCP_DENIED/403").count - 1 == 3
        }
        #expect(squid.sawTarget(port: echo.port) && squid.sawTarget(port: secure.port))
    }

    /// tinyproxy with Basic credentials: without credentials it answers 407, on the event stream's
    /// connection and on requests, plain http (absolute-form) and https (`CONNECT`) alike, each a
    /// proxy failure with that status. To wrong credentials tinyproxy 1.11 answers 401 (with
    /// `WWW-Authenticate`, as a server would): a refused tunnel keeps that status; in absolute-form
    /// it is indistinguishable from the server's answer and is passed on as one, as curl shows it.
    @Test func tinyproxyRefusesMissingAndWrongCredentials() async throws {
        let proxy = try await ProxyProcess.start(.tinyproxy(username: "alice", password: "right-pw"))
        defer { Task { await proxy.stop() } }
        let plain = try await ScriptedHTTPServer.start()
        defer { Task { await plain.stop() } }
        plain.route("/hello") { _ in .text("hi") }
        let secure = try await ScriptedHTTPServer.start(tls: try certificates.server.serverConfiguration())
        defer { Task { await secure.stop() } }
        secure.route("/hello") { _ in .text("hi") }

        let good = runtime(.http(host: "127.0.0.1", port: proxy.port, username: "alice", password: "right-pw"))
        #expect(String(buffer: try await HTTPTransport.execute(HTTPRequestSpec(url: plain.baseURL + "/hello"), runtime: good).1) == "hi")
        #expect(String(buffer: try await HTTPTransport.execute(HTTPRequestSpec(url: secure.baseURL + "/hello", tls: caTLS), runtime: good).1) == "hi")
        try await proxy.waitForTarget(port: plain.port)
        #expect(proxy.log.contains("GET http://127.0.0.1:\(plain.port)/hello"), "\(proxy.log)")

        let none = runtime(.http(host: "127.0.0.1", port: proxy.port))
        let noneErrors = [
            await #expect(throws: RealtimeError.self) { _ = try await HTTPTransport.execute(HTTPRequestSpec(url: plain.baseURL + "/hello"), runtime: none) },
            await #expect(throws: RealtimeError.self) {
                _ = try await HTTPTransport.execute(HTTPRequestSpec(url: secure.baseURL + "/hello", tls: self.caTLS), runtime: none)
            },
            await #expect(throws: RealtimeError.self) { _ = try await self.firstEvent(plain.baseURL + "/hello", runtime: none) {} },
            await #expect(throws: RealtimeError.self) { _ = try await self.firstEvent(secure.baseURL + "/hello", tls: self.caTLS, runtime: none) {} },
        ]
        for error in noneErrors {
            let text = error.map { "\($0)" } ?? ""
            #expect(error?.code == .proxyFailed, "\(text)")
            #expect(error?.status == .proxyAuthenticationRequired, "\(text)")
            #expect(text.contains("the proxy http://127.0.0.1:\(proxy.port) refused") && text.contains("proxy authentication required"), "\(text)")
        }

        let wrong = runtime(.http(host: "127.0.0.1", port: proxy.port, username: "alice", password: "wrong-pw"))
        let tunnels = [
            await #expect(throws: RealtimeError.self) {
                _ = try await HTTPTransport.execute(HTTPRequestSpec(url: secure.baseURL + "/hello", tls: self.caTLS), runtime: wrong)
            },
            await #expect(throws: RealtimeError.self) { _ = try await self.firstEvent(secure.baseURL + "/hello", tls: self.caTLS, runtime: wrong) {} },
        ]
        for error in tunnels {
            #expect(error?.code == .proxyFailed, "\(String(describing: error))")
            #expect(error?.status == .unauthorized, "\(String(describing: error))")
            #expect(!"\(String(describing: error))".contains("pw"))
        }
        #expect(try await HTTPTransport.execute(HTTPRequestSpec(url: plain.baseURL + "/hello"), runtime: wrong).0.status == .unauthorized)
        let forwarded = await #expect(throws: RealtimeError.self) { _ = try await self.firstEvent(plain.baseURL + "/hello", runtime: wrong) {} }
        #expect(forwarded?.code == .badStatus && forwarded?.status == .unauthorized, "\(String(describing: forwarded))")
        #expect(plain.requests(to: "/hello").count == 1 && secure.requests(to: "/hello").count == 1)
    }

    /// A forwarding proxy's 407 to an absolute-form request (a scripted one, which refuses every
    /// request) says whether credentials were missing or refused, on requests and event streams;
    /// the credentials went as `Proxy-Authorization: Basic` and are never printed.
    @Test func aForwardingProxys407SaysWhetherCredentialsWereMissingOrWrong() async throws {
        let proxy = try await ScriptedHTTPServer.start()
        defer { Task { await proxy.stop() } }
        proxy.route("/hello") { _ in .init(status: 407, headers: [("Proxy-Authenticate", "Basic realm=\"test\"")]) }
        for (configuration, why) in [
            (ProxyConfiguration.http(host: "127.0.0.1", port: proxy.port), "proxy authentication required"),
            (ProxyConfiguration.http(host: "127.0.0.1", port: proxy.port, username: "alice", password: "wrong-pw"), "the proxy did not accept the credentials"),
        ] {
            let runtime = runtime(configuration)
            let errors = [
                await #expect(throws: RealtimeError.self) {
                    _ = try await HTTPTransport.execute(HTTPRequestSpec(url: "http://127.0.0.1:9/hello"), runtime: runtime)
                },
                await #expect(throws: RealtimeError.self) { _ = try await self.firstEvent("http://127.0.0.1:9/hello", runtime: runtime) {} },
            ]
            for error in errors {
                let text = error.map { "\($0)" } ?? ""
                #expect(error?.code == .proxyFailed, "\(text)")
                #expect(error?.status == .proxyAuthenticationRequired, "\(text)")
                #expect(text.contains("the proxy http://127.0.0.1:\(proxy.port) refused the request to http://127.0.0.1:9/hello: \(why)"), "\(text)")
                #expect(!text.contains("pw") && !text.contains("alice"), "\(text)")
            }
        }
        let sent = proxy.requests(to: "/hello").map { $0.headers["proxy-authorization"] }
        #expect(sent == [nil, nil, "Basic " + Data("alice:wrong-pw".utf8).base64EncodedString(), "Basic " + Data("alice:wrong-pw".utf8).base64EncodedString()])
    }

    /// The proxy is not listening: every event stream (plain http, and https whose tunnel would
    /// follow the connect) and every request fails as a connect failure naming the proxy, 20 out
    /// of 20 times (the tunnel's handlers go on only after the connect succeeded, so a failed
    /// connect is never also reported as an abandoned tunnel).
    @Test func aProxyThatIsNotListeningIsAlwaysAConnectFailure() async throws {
        let refusing = try RefusingPort()
        defer { refusing.release() }
        let runtime = runtime(.http(host: "127.0.0.1", port: refusing.port))
        var reports: [String] = []
        for round in 0..<20 {
            for url in ["http://127.0.0.1:9/events", "https://127.0.0.1:9/events"] {
                let stream = await #expect(throws: RealtimeError.self) { _ = try await self.firstEvent(url, runtime: runtime) {} }
                let request = round % 4 == 0
                    ? await #expect(throws: RealtimeError.self) { _ = try await HTTPTransport.execute(HTTPRequestSpec(url: url), runtime: runtime) }
                    : stream
                for error in [stream, request] {
                    if error?.code != .connectFailed || error?.detail.contains("the proxy http://127.0.0.1:\(refusing.port)") != true {
                        reports.append("\(url): \(String(describing: error))")
                    }
                }
            }
        }
        #expect(reports.isEmpty, "\(reports.count) of the failures were not connect failures: \(reports.prefix(3))")
    }
}
