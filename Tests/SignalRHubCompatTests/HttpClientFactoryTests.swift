import AsyncHTTPClient
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import RealtimeCore
import RealtimeTesting
import SignalRClient
import Testing

/// The older client's `HttpConnectionOptions.httpClientFactory`: the negotiate request goes through
/// the app's `HttpClientProtocol` client, and whatever that client does wrong ends in a typed start
/// failure, never a hang.
@Suite("Older client's httpClientFactory", .serialized, .timeLimit(.minutes(2)))
struct HttpClientFactoryTests {
    /// An app's HTTP client: records every call, then answers as told.
    final class AppClient: HttpClientProtocol, Sendable {
        enum Behaviour { case forward, fail, status(Int), silent, twice }
        let behaviour: Behaviour
        private let calls = NIOLockedValueBox<[String]>([])
        var recorded: [String] { calls.withLockedValue { $0 } }

        init(_ behaviour: Behaviour) { self.behaviour = behaviour }

        func get(url: URL, completionHandler: @escaping (HttpResponse?, (any Error)?) -> Void) {
            calls.withLockedValue { $0.append("GET \(url.absoluteString)") }
            completionHandler(nil, URLError(.unsupportedURL))
        }

        func delete(url: URL, completionHandler: @escaping (HttpResponse?, (any Error)?) -> Void) {
            calls.withLockedValue { $0.append("DELETE \(url.absoluteString)") }
            completionHandler(nil, URLError(.unsupportedURL))
        }

        func post(url: URL, body: Data?, completionHandler: @escaping (HttpResponse?, (any Error)?) -> Void) {
            calls.withLockedValue { $0.append("POST \(url.absoluteString)") }
            let handler = UncheckedHandler(call: completionHandler)
            switch behaviour {
            case .fail:
                handler.call(nil, URLError(.cannotConnectToHost))
            case .status(let code):
                handler.call(HttpResponse(statusCode: code, contents: Data("no negotiate here".utf8)), nil)
            case .silent:
                break
            case .twice:
                // A client that calls back twice: the first answer counts, the second is ignored.
                handler.call(HttpResponse(statusCode: 503, contents: nil), nil)
                handler.call(nil, URLError(.cannotConnectToHost))
            case .forward:
                Task {
                    do {
                        var request = HTTPClientRequest(url: url.absoluteString)
                        request.method = .POST
                        request.headers.add(name: "X-App-Client", value: "1")
                        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
                        let body = try await response.body.collect(upTo: 1 << 20)
                        handler.call(HttpResponse(statusCode: Int(response.status.code), contents: Data(body.readableBytesView)), nil)
                    } catch {
                        handler.call(nil, error)
                    }
                }
            }
        }
    }

    // @unchecked Sendable: the older client's completion handler is not @Sendable; each is called
    // once, from one task, as an app's client calls it from its own queue.
    struct UncheckedHandler: @unchecked Sendable {
        let call: (HttpResponse?, (any Error)?) -> Void
    }

    static func connection(_ server: SignalRTestServer, _ client: AppClient, configure: (HttpConnectionOptions) -> Void = { _ in }) -> HubConnection {
        HubConnectionBuilder(url: URL(string: server.url)!)
            .withHttpConnectionOptions(configureHttpOptions: { options in
                options.httpClientFactory = { _ in client }
                configure(options)
            })
            .build()
    }

    @Test("Negotiate goes through the app's client, once per start; the WebSocket and calls work as usual")
    func negotiateThroughTheAppClient() async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        let client = AppClient(.forward)
        let connection = Self.connection(server, client)
        try await connection.start()
        #expect(client.recorded == ["POST \(server.url)/negotiate?negotiateVersion=1"])
        #expect(server.negotiateCount == 1, "only the app's client negotiated")
        let echoed: String = try await connection.invoke(method: "echo", arguments: "through the app's client")
        #expect(echoed == "through the app's client")
        await connection.stop()
    }

    /// The official client's `HttpClient`, given in `HttpConnectionOptions.httpClient`.
    struct OfficialClient: HttpClient {
        let calls = NIOLockedValueBox<[String]>([])
        func send(request: HttpRequest) async throws -> (StringOrData, HttpResponse) {
            calls.withLockedValue { $0.append("\(request.method.rawValue) \(request.url)") }
            var outgoing = HTTPClientRequest(url: request.url)
            outgoing.method = .POST
            let response = try await HTTPClient.shared.execute(outgoing, timeout: .seconds(10))
            let body = try await response.body.collect(upTo: 1 << 20)
            return (.data(Data(body.readableBytesView)), HttpResponse(statusCode: Int(response.status.code), contents: nil))
        }
    }

    @Test("The official client's HttpClient sends the negotiate request")
    func officialHttpClient() async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        let client = OfficialClient()
        let options = HttpConnectionOptions()
        options.httpClient = client
        let connection = HubConnectionBuilder().withUrl(url: server.url, options: options).build()
        try await connection.start()
        #expect(client.calls.withLockedValue { $0 } == ["POST \(server.url)/negotiate?negotiateVersion=1"])
        #expect(server.negotiateCount == 1, "the app's client's request was the only negotiate")
        let echoed: String = try await connection.invoke(method: "echo", arguments: "hi")
        #expect(echoed == "hi")
        await connection.stop()
    }

    @Test("The app's client failing, answering 500, calling back twice or never answering gives a typed start failure")
    func appClientFailures() async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }

        let failing = AppClient(.fail)
        let error1 = await #expect(throws: RealtimeError.self) { try await Self.connection(server, failing).start() }
        #expect(error1?.code == .connectFailed)
        #expect(error1?.underlying is URLError)

        let refusing = AppClient(.status(500))
        let error2 = await #expect(throws: RealtimeError.self) { try await Self.connection(server, refusing).start() }
        #expect(error2?.code == .badStatus)
        #expect(error2?.description.contains("500") == true)

        let twice = AppClient(.twice)
        let error4 = await #expect(throws: RealtimeError.self) { try await Self.connection(server, twice).start() }
        #expect(error4?.code == .badStatus, "the first of two callbacks decides")

        let silent = AppClient(.silent)
        let started = ContinuousClock.now
        let error3 = await #expect(throws: RealtimeError.self) {
            try await Self.connection(server, silent) { $0.timeout = 0.5 }.start()
        }
        #expect(error3?.code == .timeout)
        #expect(ContinuousClock.now - started < .seconds(10))

        #expect(failing.recorded.count == 1 && refusing.recorded.count == 1 && twice.recorded.count == 1 && silent.recorded.count == 1)
        #expect(server.negotiateCount == 0, "our own HTTP client never negotiated")
        #expect(server.connectionIds.isEmpty)
    }
}
