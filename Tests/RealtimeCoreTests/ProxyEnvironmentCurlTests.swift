import Foundation
@testable import RealtimeCore
import RealtimeTesting
import Testing

/// The proxy environment variables and `no_proxy` as curl reads them, with curl itself as the
/// reference: for each case, `/usr/bin/curl -sv -o /dev/null --max-time 5 URL` runs with exactly
/// the case's environment (the proxy variables point at listeners of this test), its verbose
/// output says which listener it tried (or none: direct), and ``ProxyConfiguration`` must choose
/// the same.
@Suite(.serialized, .timeLimit(.minutes(3))) struct ProxyEnvironmentCurlTests {
    /// One case: the environment (`{A}` and `{B}` stand for the two listeners' proxy URLs) and the
    /// URL's scheme and host (its port is one that refuses connections).
    struct Case: Sendable, CustomStringConvertible {
        let environment: [String: String]
        let scheme: String
        let host: String

        init(_ environment: [String: String], _ host: String, scheme: String = "http") {
            self.environment = environment
            self.scheme = scheme
            self.host = host
        }

        var description: String { "\(scheme)://\(host) with \(environment.sorted { $0.key < $1.key })" }
    }

    static func noProxy(_ list: String, _ host: String) -> Case { Case(["http_proxy": "{A}", "no_proxy": list], host) }

    static let cases: [Case] = [
        // `*` matches everything only as the whole value.
        noProxy("*", "a.example.invalid"),
        noProxy(" *", "a.example.invalid"),
        noProxy("*,other.invalid", "a.example.invalid"),
        noProxy("other.invalid,*", "a.example.invalid"),
        noProxy("*.example.invalid", "a.example.invalid"),
        // Names: the host itself and its subdomains, case-insensitively.
        noProxy("example.invalid", "example.invalid"),
        noProxy("example.invalid", "api.example.invalid"),
        noProxy("example.invalid", "a.b.example.invalid"),
        noProxy("example.invalid", "notexample.invalid"),
        noProxy("EXAMPLE.invalid", "Api.Example.INVALID"),
        // One leading and one trailing dot of an entry, one trailing dot of the host, are ignored.
        noProxy(".example.invalid", "example.invalid"),
        noProxy("..example.invalid", "example.invalid"),
        noProxy("example.invalid.", "example.invalid"),
        noProxy("example.invalid..", "example.invalid"),
        noProxy("example.invalid", "example.invalid."),
        // Separators: commas and blanks, repeated or leading.
        noProxy("localhost 127.0.0.1", "127.0.0.1"),
        noProxy("localhost, 127.0.0.1", "127.0.0.1"),
        noProxy("localhost\t127.0.0.1", "127.0.0.1"),
        noProxy("  localhost", "localhost"),
        noProxy(", localhost,,", "localhost"),
        noProxy("", "127.0.0.1"),
        // IPv4 hosts: an address or a CIDR range only, never a name's tail; names are not resolved.
        noProxy("0.0.1", "127.0.0.1"),
        noProxy("127.0.0", "127.0.0.1"),
        noProxy("127.0.0.1", "127.0.0.10"),
        noProxy("127.0.0.0/8", "127.0.0.1"),
        noProxy("127.0.0.0/24", "127.0.1.1"),
        noProxy("127.0.0.0/8x", "127.0.0.1"),
        noProxy("127.0.0.1/33", "127.0.0.1"),
        noProxy("127.0.0.1/0", "127.0.0.1"),
        noProxy("1.2.3.4/0", "127.0.0.1"),
        noProxy("127.0.0.1/abc", "127.0.0.1"),
        noProxy("127.0.0.0/abc", "127.0.0.1"),
        noProxy("localhost", "127.0.0.1"),
        noProxy("127.0.0.1", "localhost"),
        noProxy("::1", "[::1]"),
        // Which variable: lower case first, upper case when the lower-case one is unset or empty,
        // HTTP_PROXY never; all_proxy when the scheme's own is missing.
        Case(["http_proxy": "{A}", "NO_PROXY": "127.0.0.1"], "127.0.0.1"),
        Case(["http_proxy": "{A}", "no_proxy": "", "NO_PROXY": "127.0.0.1"], "127.0.0.1"),
        Case(["http_proxy": "{A}", "no_proxy": "other.invalid", "NO_PROXY": "127.0.0.1"], "127.0.0.1"),
        Case(["HTTP_PROXY": "{A}"], "127.0.0.1"),
        Case(["HTTP_PROXY": "{A}", "all_proxy": "{B}"], "127.0.0.1"),
        Case(["http_proxy": "", "all_proxy": "{B}"], "127.0.0.1"),
        Case(["http_proxy": "{A}", "all_proxy": "{B}"], "127.0.0.1"),
        Case(["https_proxy": "{A}"], "127.0.0.1"),
        Case(["https_proxy": "{A}"], "127.0.0.1", scheme: "https"),
        Case(["HTTPS_PROXY": "{A}"], "127.0.0.1", scheme: "https"),
        Case(["https_proxy": "{A}", "http_proxy": "{B}"], "127.0.0.1"),
        Case(["ALL_PROXY": "{B}"], "127.0.0.1", scheme: "https"),
        Case(["all_proxy": "{B}", "ALL_PROXY": "{A}"], "127.0.0.1"),
        Case(["https_proxy": "{A}", "no_proxy": "*"], "127.0.0.1", scheme: "https"),
        Case(["http_proxy": "127.0.0.1:{A-PORT}"], "127.0.0.1"),
    ]

    static let curl = "/usr/bin/curl"

    struct Missing: Error, CustomStringConvertible {
        let description: String
    }

    @Test func ourProxyChoiceIsCurls() async throws {
        guard FileManager.default.isExecutableFile(atPath: Self.curl) else {
            throw Missing(description: "\(Self.curl) is missing: run Scripts/prepare.sh, which installs the Debian package curl (or apt-get install curl)")
        }
        let listenerA = try await ScriptedHTTPServer.start()
        defer { Task { await listenerA.stop() } }
        let listenerB = try await ScriptedHTTPServer.start()
        defer { Task { await listenerB.stop() } }
        let target = try RefusingPort()
        defer { target.release() }
        let names = [listenerA.port: "A", listenerB.port: "B"]

        var differences: [String] = []
        var choices: Set<String> = []
        for testCase in Self.cases {
            let environment = testCase.environment.mapValues {
                $0.replacingOccurrences(of: "{A}", with: "http://127.0.0.1:\(listenerA.port)")
                    .replacingOccurrences(of: "{B}", with: "http://127.0.0.1:\(listenerB.port)")
                    .replacingOccurrences(of: "{A-PORT}", with: "\(listenerA.port)")
            }
            let url = "\(testCase.scheme)://\(testCase.host):\(target.port)/"
            let stderr = try await Self.runCurl(url, environment: environment)
            let curlChoice = names.first { stderr.contains("Trying 127.0.0.1:\($0.key)") }?.value ?? "direct"
            let endpoint = try Endpoint(url, allowedSchemes: ["http", "https"])
            let server = try ProxyConfiguration.environment(environment).server(forScheme: testCase.scheme, host: endpoint.host)
            let ours = server.map { names[$0.port] ?? "port \($0.port)" } ?? "direct"
            choices.insert(curlChoice)
            if ours != curlChoice { differences.append("\(testCase): curl \(curlChoice), ours \(ours)") }
        }
        #expect(differences.isEmpty, "\(differences.joined(separator: "\n"))")
        #expect(choices == ["A", "B", "direct"], "the cases exercise both listeners and direct connections")
    }

    /// Deliberate differences from curl 7.88, which compares an IPv6 host with `no_proxy` as text
    /// (it has taken the brackets off by then): an IPv6 host here matches an IPv6 address or CIDR
    /// range, in brackets or not, as an IPv4 host matches its own.
    @Test func ipv6HostsMatchAddressesAndRanges() throws {
        for (list, host) in [("fd00::/8", "[fd12::1]"), ("[::1]", "[::1]"), ("0:0::1", "[::1]")] {
            let endpoint = try Endpoint("http://\(host)/", allowedSchemes: ["http"])
            let environment = ProxyConfiguration.environment(["http_proxy": "http://127.0.0.1:3128", "no_proxy": list])
            #expect(try environment.server(forScheme: "http", host: endpoint.host) == nil, "\(list) \(host)")
        }
    }

    /// curl's verbose output (standard error) for `url` with exactly `environment`.
    static func runCurl(_ url: String, environment: [String: String]) async throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: curl)
        process.arguments = ["-sv", "-o", "/dev/null", "--max-time", "5", url]
        process.environment = environment
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        // Read off the tasks' threads: the listeners curl talks to run in this process.
        let output = await BlockingWork.run { errors.fileHandleForReading.readDataToEndOfFile() }
        await BlockingWork.run { process.waitUntilExit() }
        return String(decoding: output, as: UTF8.self)
    }
}
